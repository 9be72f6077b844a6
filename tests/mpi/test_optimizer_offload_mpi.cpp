// optimizer.offload_fraction with the distributed optimizer under mpirun
// (dp = world size): each rank's shard keeps a prefix of its state in host
// buffers, and f in {0, 0.5, 1} gives the same all-gathered weights and the
// same gathered optimizer state bit for bit over 3 steps, in float64 and
// float32, with several buckets per group and clipping on.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/distributed/world.h"
#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/param_groups.h"

namespace bb {
namespace {

using State = DistributedOptimizer::State;

struct Trained {
  std::vector<std::vector<double>> state;
  int64_t host_numel = 0;
};

Trained train(DType dtype, double fraction) {
  dist::World& world = dist::World::instance();
  const int n = world.size(), rank = world.rank();
  auto parallel = dist::ParallelState::create(world, dist::GroupSizes{});
  ParamStore store;
  store.add("embed.weight", {5 * n, 3}, {});
  store.add("norm.weight", {7}, {});
  store.add("proj.weight", {4, 2 * n + 1}, {});
  ParamGroupOptions options;
  options.no_weight_decay_1d = true;
  store.allocate(make_param_groups(*parallel, options), dtype, dtype, Device::cpu(), /*bucket_size=*/8);
  int i = 0;
  for (Parameter& p : store.params()) {
    std::vector<double> v(size_t(p.value.numel()));
    for (size_t k = 0; k < v.size(); ++k, ++i) v[k] = 0.1 * std::sin(double(i));
    p.value.copy_from(Tensor::from_doubles(v, p.value.shape(), dtype));
  }
  AdamWConfig cfg;
  cfg.clip_grad = 0.05;
  cfg.offload_fraction = fraction;
  DistributedOptimizer opt(store, *parallel, cfg);
  Trained out;
  for (const DistributedOptimizer::GroupState& g : opt.groups()) out.host_numel += g.host.numel;
  for (int step = 1; step <= 3; ++step) {
    opt.invalidate_grads();
    int j = 0;
    for (Parameter& p : store.params()) {
      std::vector<double> g(size_t(p.grad.numel()));
      for (size_t k = 0; k < g.size(); ++k, ++j) g[k] = std::cos(double(j * step + rank));
      p.grad.copy_from(Tensor::from_doubles(g, p.grad.shape(), dtype));
    }
    for (Parameter& p : store.params()) opt.grad_ready(p);
    EXPECT_TRUE(opt.step(1e-2).update_successful);
  }
  for (Parameter& p : store.params()) out.state.push_back(p.value.to_doubles());
  for (DistributedOptimizer::GroupState& g : opt.groups())
    for (State which : {State::Master, State::ExpAvg, State::ExpAvgSq})
      out.state.push_back(opt.gather_state(g, which).to_doubles());
  return out;
}

TEST(MpiOptimizerOffload, FractionsGiveBitIdenticalSteps) {
  for (DType dtype : {DType::F64, DType::F32}) {
    const Trained plain = train(dtype, 0.0);
    EXPECT_EQ(plain.host_numel, 0);
    for (double f : {0.5, 1.0}) {
      const Trained hybrid = train(dtype, f);
      EXPECT_GT(hybrid.host_numel, 0) << f;
      EXPECT_EQ(hybrid.state, plain.state) << dtype_name(dtype) << " f=" << f;
    }
  }
}

}  // namespace
}  // namespace bb
