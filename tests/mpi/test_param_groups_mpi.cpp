// Per-group gradient reduction under mpirun: with ep = world size, dense
// parameters are summed over dp (every rank) while expert parameters, which
// each ep rank holds for its own experts, are reduced over the
// expert-data-parallel group (one rank here) and keep their own gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/distributed/world.h"
#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/param_groups.h"

namespace bb {
namespace {

TEST(MpiParamGroups, EachGroupReducesOverItsOwnCommunicator) {
  dist::World& world = dist::World::instance();
  const int n = world.size(), rank = world.rank();
  dist::GroupSizes sizes;
  sizes.ep = n;
  auto parallel = dist::ParallelState::create(world, sizes);
  ASSERT_EQ(parallel->dp_size(), n);
  ASSERT_EQ(parallel->edp_size(), 1);

  ParamStore store;
  store.add("dense.weight", {2 * n, 3}, {});
  store.add("experts.weight", {2 * n, 3}, {}, InitKind::Normal, ParamClass::Expert);
  store.allocate(make_param_groups(*parallel, {}), DType::F64, DType::F64, Device::cpu());
  for (Parameter& p : store.params()) p.grad.fill_(double(rank + 1));

  AdamWConfig cfg;
  cfg.clip_grad = 0.0;
  DistributedOptimizer opt(store, *parallel, cfg);
  ASSERT_EQ(opt.groups().size(), 2u);
  for (Parameter& p : store.params()) opt.grad_ready(p);
  for (DistributedOptimizer::GroupState& g : opt.groups()) {
    const std::vector<double> shard = g.reducer->reduced_grads().to_doubles();
    const bool dense = g.group->name() == "dense";
    EXPECT_EQ(int64_t(shard.size()), dense ? 6 : 6 * n) << g.group->name();   // dp shards the dense group
    const double expect = dense ? double(n) * (n + 1) / 2 : double(rank + 1);
    for (double v : shard) EXPECT_EQ(v, expect) << g.group->name();
  }
  // The norm counts each element once: the dense sums once over the world, each rank's experts once.
  double expect_sq = 6.0 * n * (double(n) * (n + 1) / 2) * (double(n) * (n + 1) / 2);
  for (int r = 0; r < n; ++r) expect_sq += 6.0 * n * double(r + 1) * double(r + 1);
  EXPECT_NEAR(opt.step(1e-3).grad_norm, std::sqrt(expect_sq), 1e-9 * std::sqrt(expect_sq));
}

}  // namespace
}  // namespace bb
