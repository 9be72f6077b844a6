// Tests for the pipeline action lists: exact lists for small cases, and for
// a grid of pp x vpp x microbatches, every rank simulated together: each send
// meets its receive, nothing deadlocks, every forward and backward runs once,
// and the bubble is Megatron's (pp - 1) / (vpp m + pp - 1).
#include "bumblebee/runtime/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <set>

#include "bumblebee/core/error.h"
#include "bumblebee/runtime/pipeline_simulation.h"

namespace {

using bb::PipelineAction;

std::string listing(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const PipelineAction& a : actions) s += (s.empty() ? "" : " ") + bb::describe(a);
  return s;
}

std::vector<std::vector<PipelineAction>> all_ranks(int pp, int vpp, int m, bool forward_only) {
  std::vector<std::vector<PipelineAction>> p;
  for (int r = 0; r < pp; ++r) p.push_back(bb::pipeline_schedule(pp, vpp, r, m, forward_only));
  return p;
}

TEST(PipelineSchedule, OneFOneBListsOfTwoStages) {
  // Rank 0: one warm-up forward, then 1F1B; each Exchange carries the previous output and the next input.
  EXPECT_EQ(listing(bb::pipeline_schedule(2, 1, 0, 3, false)),
            "F0.0 X[>F0@0] F1.0 X[>F1@0 <B0@1] B0.0 F2.0 X[>F2@0 <B1@1] B1.0 X[<B2@1] B2.0");
  // Rank 1 (the last stage): no warm-up.
  EXPECT_EQ(listing(bb::pipeline_schedule(2, 1, 1, 3, false)),
            "X[<F0@0] F0.0 B0.0 X[>B0@1 <F1@0] F1.0 B1.0 X[>B1@1 <F2@0] F2.0 B2.0 X[>B2@1]");
  EXPECT_EQ(listing(bb::pipeline_schedule(2, 1, 1, 2, true)), "X[<F0@0] F0.0 X[<F1@0] F1.0");
}

TEST(PipelineSchedule, InterleavedOrderIsMegatrons) {
  // pp 2, vpp 2, m 4: rank 0 warms up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards (microbatch groups of pp = 2).
  std::string computes;
  for (const PipelineAction& a : bb::pipeline_schedule(2, 2, 0, 4, false))
    if (a.kind != PipelineAction::Kind::Exchange) computes += (computes.empty() ? "" : " ") + bb::describe(a);
  EXPECT_EQ(computes, "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
}

TEST(PipelineSchedule, BadMicrobatchCountsNameTheNumbers) {
  try {
    bb::pipeline_schedule(4, 1, 0, 3, false);
    FAIL();
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_microbatches 3 < pp 4"), std::string::npos) << e.what();
  }
  try {
    bb::pipeline_schedule(2, 2, 0, 3, false);
    FAIL();
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs num_microbatches divisible by pp 2, got 3"), std::string::npos)
        << e.what();
  }
}

TEST(PipelineSchedule, EveryGridCellMatchesAndFinishes) {
  for (int pp : {2, 3, 4}) {
    for (int vpp : {1, 2, 3}) {
      for (int m = pp; m <= 3 * pp + 1; ++m) {
        if (vpp > 1 && m % pp != 0) continue;
        for (bool forward_only : {false, true}) {
          SCOPED_TRACE("pp " + std::to_string(pp) + " vpp " + std::to_string(vpp) + " m " + std::to_string(m) +
                       (forward_only ? " forward only" : ""));
          const auto programs = all_ranks(pp, vpp, m, forward_only);
          const bb::PipelineSimulation sim = bb::simulate_pipeline(programs, 1.0, 2.0);
          ASSERT_TRUE(sim.ok) << sim.error;
          // Each of the m microbatches crosses pp * vpp - 1 stage boundaries forward (and as many backward).
          EXPECT_EQ(sim.messages, m * (pp * vpp - 1) * (forward_only ? 1 : 2));
          for (int r = 0; r < pp; ++r) {
            std::set<std::pair<int, int>> fwd, bwd;
            for (const PipelineAction& a : programs[size_t(r)]) {
              if (a.kind == PipelineAction::Kind::Forward) EXPECT_TRUE(fwd.insert({a.microbatch, a.chunk}).second);
              if (a.kind == PipelineAction::Kind::Backward) {
                EXPECT_TRUE(fwd.count({a.microbatch, a.chunk})) << "backward before its forward";
                EXPECT_TRUE(bwd.insert({a.microbatch, a.chunk}).second);
              }
            }
            EXPECT_EQ(int(fwd.size()), m * vpp);
            EXPECT_EQ(int(bwd.size()), forward_only ? 0 : m * vpp);
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, BubbleIsMegatronsFormula) {
  // A chunk's forward costs 1 / vpp, its backward 2 / vpp: the same work per rank for any vpp.
  for (auto [pp, vpp, m] : {std::tuple{2, 1, 4}, {4, 1, 8}, {4, 1, 4}, {2, 2, 4}, {4, 2, 8}, {4, 2, 4}}) {
    const bb::PipelineSimulation sim = bb::simulate_pipeline(all_ranks(pp, vpp, m, false), 1.0 / vpp, 2.0 / vpp);
    ASSERT_TRUE(sim.ok) << sim.error;
    EXPECT_NEAR(sim.idle_fraction(), double(pp - 1) / (vpp * m + pp - 1), 1e-12)
        << "pp " << pp << " vpp " << vpp << " m " << m;
  }
}

}  // namespace
