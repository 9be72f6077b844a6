// ParallelState in one process: single_rank, create on a one-rank world, size errors, check_divisible.
#include "bumblebee/distributed/parallel_state.h"

#include <gtest/gtest.h>

#include <functional>

#include "bumblebee/distributed/world.h"

using bb::dist::GroupSizes;
using bb::dist::ParallelState;

namespace {

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

void expect_all_groups_single(ParallelState& ps) {
  EXPECT_EQ(ps.world_rank(), 0);
  EXPECT_EQ(ps.world_size(), 1);
  for (bb::dist::Communicator* c : {&ps.world(), &ps.tp(), &ps.cp(), &ps.dp(), &ps.dp_cp(), &ps.pp(), &ps.ep(),
                                    &ps.etp(), &ps.edp(), &ps.tp_cp()}) {
    EXPECT_EQ(c->size(), 1) << c->name();
    EXPECT_EQ(c->rank(), 0) << c->name();
  }
  EXPECT_EQ(ps.tp_size() * ps.cp_size() * ps.dp_size() * ps.pp_size() * ps.ep_size() * ps.etp_size() *
                ps.edp_size(),
            1);
}

}  // namespace

TEST(ParallelState, SingleRank) {
  auto ps = ParallelState::single_rank();
  expect_all_groups_single(*ps);
  EXPECT_EQ(ps->tp().name(), "tp");
  EXPECT_EQ(ps->edp().name(), "edp");
  EXPECT_EQ(ps->layout().dp, 1);
}

TEST(ParallelState, CreateOnOneProcessWorld) {
  auto ps = ParallelState::create(bb::dist::World::instance(), GroupSizes{});
  expect_all_groups_single(*ps);
  EXPECT_EQ(ps->dp_cp().name(), "dp_cp");
}

TEST(ParallelState, SizesThatDoNotFactorTheWorldAreAnError) {
  GroupSizes s;
  s.tp = 2;
  std::string e = error_message([&] { ParallelState::create(bb::dist::World::instance(), s); });
  EXPECT_NE(e.find("world size 1 is not divisible by tp*cp*pp = 2 (tp 2, cp 1, pp 1)"), std::string::npos) << e;
}

TEST(ParallelState, CheckDivisible) {
  EXPECT_NO_THROW(bb::dist::check_divisible("num_attention_heads", 8, "tp", 4));
  std::string e = error_message([] { bb::dist::check_divisible("num_attention_heads", 6, "tp", 4); });
  EXPECT_EQ(e.rfind("num_attention_heads 6 is not divisible by tp 4", 0), 0u) << e;
  e = error_message([] { bb::dist::check_divisible("vocab_size", 10, "tp", 0); });
  EXPECT_EQ(e.rfind("tp must be positive, got 0", 0), 0u) << e;
}
