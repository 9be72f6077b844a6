// Rank layout against Megatron-Core's documented examples and hand-worked cases.
#include "bumblebee/distributed/rank_layout.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "bumblebee/core/error.h"

using bb::dist::find_group;
using bb::dist::group_ranks;
using bb::dist::GroupKind;
using bb::dist::GroupSizes;
using bb::dist::ParallelLayout;
using bb::dist::resolve_layout;
using Groups = std::vector<std::vector<int>>;

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

std::string error_of(int world, const GroupSizes& s) {
  try {
    resolve_layout(world, s);
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RankLayout, World8Tp2Pp2) {
  ParallelLayout l = resolve_layout(8, sizes(2, 1, 2));
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(group_ranks(l, GroupKind::TP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::DP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::PP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::CP), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::DP_CP), group_ranks(l, GroupKind::DP));
  EXPECT_EQ(group_ranks(l, GroupKind::TP_CP), group_ranks(l, GroupKind::TP));
  // Experts default to etp = tp and ep = 1: edp spans the same ranks as dp.
  EXPECT_EQ(group_ranks(l, GroupKind::ETP), group_ranks(l, GroupKind::TP));
  EXPECT_EQ(group_ranks(l, GroupKind::EDP), group_ranks(l, GroupKind::DP));
}

// The 16-GPU example of Megatron-Core's initialize_model_parallel docstring.
TEST(RankLayout, MegatronDocstringWorld16Tp2Pp4) {
  ParallelLayout l = resolve_layout(16, sizes(2, 1, 4));
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(group_ranks(l, GroupKind::TP),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(group_ranks(l, GroupKind::DP),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(group_ranks(l, GroupKind::PP), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

// Megatron's context-parallel example: 8 GPUs, tp 4, cp 2 -> cp groups [g0, g4], ...
TEST(RankLayout, ContextParallelWorld8Tp4Cp2) {
  ParallelLayout l = resolve_layout(8, sizes(4, 2, 1));
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(group_ranks(l, GroupKind::CP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::TP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::TP_CP), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

// cp sits between tp and dp; dp_cp lists cp fastest.
TEST(RankLayout, DpCpOrderWorld8Tp2Cp2) {
  ParallelLayout l = resolve_layout(8, sizes(2, 2, 1));
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(group_ranks(l, GroupKind::CP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::DP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::DP_CP), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::TP_CP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(RankLayout, ExpertGroupsWorld8Tp2Ep4Etp1) {
  ParallelLayout l = resolve_layout(8, sizes(2, 1, 1, 4, 1));
  EXPECT_EQ(l.etp, 1);
  EXPECT_EQ(l.edp, 2);
  EXPECT_EQ(group_ranks(l, GroupKind::ETP), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::EP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::EDP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// etp carved independently of tp (Megatron's expert RankGenerator with tp = etp,
// order tp-ep-dp-pp): edp = world / (etp * ep * pp).
TEST(RankLayout, ExpertGroupsWorld8Tp1Ep2Etp2) {
  ParallelLayout l = resolve_layout(8, sizes(1, 1, 1, 2, 2));
  EXPECT_EQ(l.dp, 8);
  EXPECT_EQ(l.edp, 2);
  EXPECT_EQ(group_ranks(l, GroupKind::ETP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::EP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::EDP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(RankLayout, ExpertGroupsWorld8Tp2Ep4Etp2) {
  ParallelLayout l = resolve_layout(8, sizes(2, 1, 1, 4, 2));
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.edp, 1);
  EXPECT_EQ(group_ranks(l, GroupKind::ETP), group_ranks(l, GroupKind::TP));
  EXPECT_EQ(group_ranks(l, GroupKind::EP), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(RankLayout, ExpertGroupsWorld8Tp2Ep2EtpDefaultPp2) {
  ParallelLayout l = resolve_layout(8, sizes(2, 1, 2, 2));
  EXPECT_EQ(l.etp, 2);
  EXPECT_EQ(l.edp, 1);
  EXPECT_EQ(group_ranks(l, GroupKind::ETP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::EP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(group_ranks(l, GroupKind::EDP), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  // Pipeline stages hold the same ranks in the dense and the expert view.
  EXPECT_EQ(group_ranks(l, GroupKind::PP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Every kind partitions the world, for a spread of shapes.
TEST(RankLayout, EveryKindPartitionsTheWorld) {
  const GroupKind kinds[] = {GroupKind::TP,    GroupKind::CP, GroupKind::DP,  GroupKind::DP_CP, GroupKind::PP,
                             GroupKind::TP_CP, GroupKind::EP, GroupKind::ETP, GroupKind::EDP};
  const std::pair<int, GroupSizes> cases[] = {{1, sizes(1, 1, 1)},       {6, sizes(3, 1, 2)},
                                              {12, sizes(2, 3, 1, 2, 1)}, {16, sizes(2, 2, 2, 4, 1)},
                                              {24, sizes(2, 1, 3, 4)}};
  for (const auto& [world, s] : cases) {
    ParallelLayout l = resolve_layout(world, s);
    for (GroupKind k : kinds) {
      Groups g = group_ranks(l, k);
      std::vector<int> all;
      for (const auto& members : g) {
        EXPECT_EQ(members.size(), g.front().size()) << bb::dist::group_kind_name(k);
        all.insert(all.end(), members.begin(), members.end());
      }
      std::sort(all.begin(), all.end());
      for (int r = 0; r < world; ++r) ASSERT_EQ(all[size_t(r)], r) << "world " << world << " " << group_kind_name(k);
    }
  }
}

TEST(RankLayout, FindGroup) {
  Groups dp = group_ranks(resolve_layout(8, sizes(2, 1, 2)), GroupKind::DP);
  auto place = find_group(dp, 5);
  EXPECT_EQ(place.group_index, 3);
  EXPECT_EQ(place.rank_in_group, 0);
  place = find_group(dp, 6);
  EXPECT_EQ(place.group_index, 2);
  EXPECT_EQ(place.rank_in_group, 1);
  EXPECT_THROW(find_group(dp, 8), bb::Error);
}

TEST(RankLayout, ErrorsNameTheNumbers) {
  std::string e = error_of(6, sizes(2, 1, 2));
  EXPECT_NE(e.find("world size 6 is not divisible by tp*cp*pp = 4 (tp 2, cp 1, pp 2)"), std::string::npos) << e;
  e = error_of(8, sizes(2, 1, 1, 3, 1));
  EXPECT_NE(e.find("tp*cp*dp = 8 (tp 2, cp 1, dp 4) is not divisible by etp*ep = 3 (etp 1, ep 3)"),
            std::string::npos)
      << e;
  e = error_of(4, sizes(0, 1, 1));
  EXPECT_NE(e.find("parallel sizes must be positive: tp 0"), std::string::npos) << e;
  EXPECT_EQ(error_of(8, sizes(2, 1, 1, 4, 2)), "");
}
