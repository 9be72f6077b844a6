// ParallelState on 2, 4 and 8 ranks: every group's members, ranks and sizes
// match the layout arithmetic, and bad sizes fail on every rank without a hang.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/distributed/world.h"

using bb::DType;
using bb::Tensor;
using bb::dist::Communicator;
using bb::dist::GroupKind;
using bb::dist::GroupSizes;
using bb::dist::ParallelState;
using bb::dist::World;

namespace {

GroupSizes sizes(int tp, int cp, int pp, int ep = 1, int etp = 0) {
  GroupSizes s;
  s.tp = tp;
  s.cp = cp;
  s.pp = pp;
  s.ep = ep;
  s.etp = etp;
  return s;
}

bool fits(int world, const GroupSizes& s) {
  const int etp = s.etp == 0 ? s.tp : s.etp;
  const int model = s.tp * s.cp * s.pp;
  return world % model == 0 && (world / s.pp) % (etp * s.ep) == 0;
}

std::string describe(const GroupSizes& s) {
  return "tp " + std::to_string(s.tp) + " cp " + std::to_string(s.cp) + " pp " + std::to_string(s.pp) + " ep " +
         std::to_string(s.ep) + " etp " + std::to_string(s.etp);
}

Communicator& group_of(ParallelState& ps, GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return ps.tp();
    case GroupKind::CP: return ps.cp();
    case GroupKind::DP: return ps.dp();
    case GroupKind::DP_CP: return ps.dp_cp();
    case GroupKind::PP: return ps.pp();
    case GroupKind::TP_CP: return ps.tp_cp();
    case GroupKind::EP: return ps.ep();
    case GroupKind::ETP: return ps.etp();
    case GroupKind::EDP: return ps.edp();
  }
  return ps.world();
}

std::string error_on_create(const GroupSizes& s) {
  try {
    ParallelState::create(World::instance(), s);
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Configurations spanning every dimension; each world size runs those that fit.
TEST(MpiParallelState, GroupsMatchTheLayout) {
  World& w = World::instance();
  const GroupSizes candidates[] = {
      sizes(1, 1, 1),       sizes(2, 1, 1),       sizes(1, 2, 1),       sizes(1, 1, 2),       sizes(1, 1, 1, 2),
      sizes(2, 1, 1, 2, 1), sizes(2, 1, 2),       sizes(2, 2, 1),       sizes(4, 1, 1),       sizes(1, 2, 2),
      sizes(2, 1, 1, 2),    sizes(1, 1, 1, 4),    sizes(2, 1, 1, 4, 1), sizes(2, 2, 2),       sizes(2, 1, 2, 2),
      sizes(4, 1, 1, 2, 1), sizes(1, 1, 8),       sizes(2, 2, 1, 4, 1), sizes(1, 1, 2, 4, 1), sizes(8, 1, 1, 8, 1)};
  const GroupKind kinds[] = {GroupKind::TP,    GroupKind::CP, GroupKind::DP,  GroupKind::DP_CP, GroupKind::PP,
                             GroupKind::TP_CP, GroupKind::EP, GroupKind::ETP, GroupKind::EDP};
  int tried = 0;
  for (const GroupSizes& s : candidates) {
    if (!fits(w.size(), s)) continue;
    ++tried;
    auto ps = ParallelState::create(w, s);
    const bb::dist::ParallelLayout& l = ps->layout();
    EXPECT_EQ(ps->world_size(), w.size());
    EXPECT_EQ(ps->world_rank(), w.rank());
    EXPECT_EQ(ps->tp_size(), l.tp) << describe(s);
    EXPECT_EQ(ps->cp_size(), l.cp) << describe(s);
    EXPECT_EQ(ps->dp_size(), w.size() / (l.tp * l.cp * l.pp)) << describe(s);
    EXPECT_EQ(ps->pp_size(), l.pp) << describe(s);
    EXPECT_EQ(ps->ep_size(), l.ep) << describe(s);
    EXPECT_EQ(ps->etp_size(), s.etp == 0 ? s.tp : s.etp) << describe(s);
    EXPECT_EQ(ps->edp_size(), w.size() / (l.pp * l.etp * l.ep)) << describe(s);
    for (GroupKind k : kinds) {
      Communicator& c = group_of(*ps, k);
      const std::vector<std::vector<int>> groups = bb::dist::group_ranks(l, k);
      const bb::dist::GroupPlace place = bb::dist::find_group(groups, w.rank());
      const std::vector<int>& expected = groups[size_t(place.group_index)];
      // The members, in group-rank order, as the group itself reports them.
      Tensor members = Tensor::zeros({int64_t(expected.size())}, DType::I32);
      c.all_gather(Tensor::from_vector<int32_t>({w.rank()}, {1}), members);
      double sum = c.all_reduce_scalar(double(w.rank()));
      std::vector<double> got = members.to_doubles();
      EXPECT_EQ(c.name(), bb::dist::group_kind_name(k));
      EXPECT_EQ(c.size(), int(expected.size())) << describe(s) << " group " << c.name();
      EXPECT_EQ(c.rank(), place.rank_in_group) << describe(s) << " group " << c.name();
      for (size_t i = 0; i < expected.size(); ++i)
        EXPECT_EQ(got[i], expected[i]) << describe(s) << " group " << c.name() << " member " << i;
      EXPECT_EQ(sum, std::accumulate(expected.begin(), expected.end(), 0.0)) << describe(s) << " " << c.name();
    }
  }
  EXPECT_GE(tried, 6) << "too few configurations fit a world of " << w.size();
}

TEST(MpiParallelState, SizesThatDoNotFactorFailOnEveryRank) {
  World& w = World::instance();
  const int n = w.size();
  std::string e = error_on_create(sizes(3, 1, 1));
  EXPECT_NE(e.find("world size " + std::to_string(n) + " is not divisible by tp*cp*pp = 3 (tp 3, cp 1, pp 1)"),
            std::string::npos)
      << e;
  e = error_on_create(sizes(1, 1, 1, 3));
  EXPECT_NE(e.find("tp*cp*dp = " + std::to_string(n) + " (tp 1, cp 1, dp " + std::to_string(n) +
                   ") is not divisible by etp*ep = 3 (etp 1, ep 3)"),
            std::string::npos)
      << e;
  // Reaching the barrier on every rank shows nobody was left waiting.
  w.comm().barrier();
}

TEST(MpiParallelState, RanksThatDisagreeFailOnEveryRank) {
  World& w = World::instance();
  std::string e = error_on_create(sizes(w.rank() == 0 ? 2 : 1, 1, 1));
  EXPECT_NE(e.find("ranks disagree on the parallel sizes: tp ranges from 1 to 2"), std::string::npos) << e;
  w.comm().barrier();
}
