// NCCL collectives through the same Communicator, on CUDA tensors: one GPU per
// rank (cuda:local_rank). Skipped, on every rank together, unless every rank
// has its GPU; CPU-only builds compile it and skip.
#include <gtest/gtest.h>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/distributed/world.h"
#include "tests/mpi/mpi_test_support.h"

using bb::Device;
using bb::DType;
using bb::Tensor;
using bb::dist::Communicator;
using bb::dist::ReduceOp;
using bb::dist::World;

using bb::test::every_rank_has_a_gpu;

namespace {

// Collective decision, so that no rank runs a collective the others skip.
Tensor on_gpu(const std::vector<double>& v, const bb::Shape& shape, DType dt) {
  return Tensor::from_doubles(v, shape, dt).to(Device::cuda(World::instance().local_rank()));
}

}  // namespace

TEST(NcclCollectives, SameCommunicatorServesCudaTensors) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one GPU per rank";
  World& w = World::instance();
  Communicator& c = w.comm();
  const int n = c.size(), me = c.rank();

  // bfloat16 sum of small integers is exact.
  Tensor sum = on_gpu({double(me), 1.0, 2.0 * me}, {3}, DType::BF16);
  c.all_reduce(sum);
  Tensor max = on_gpu({double(me), -double(me)}, {2}, DType::F32);
  c.all_reduce(max, ReduceOp::Max);
  Tensor gathered = Tensor::zeros({2 * n}, DType::F32, Device::cuda(w.local_rank()));
  c.all_gather(on_gpu({me * 10.0, me * 10.0 + 1}, {2}, DType::F32), gathered);
  std::vector<double> rs_in(size_t(2 * n));
  for (int i = 0; i < 2 * n; ++i) rs_in[size_t(i)] = me * 100.0 + i;
  Tensor scattered = Tensor::zeros({2}, DType::F32, Device::cuda(w.local_rank()));
  c.reduce_scatter(on_gpu(rs_in, {2 * n}, DType::F32), scattered);
  Tensor bcast = on_gpu({double(me), double(me)}, {2}, DType::F64);
  c.broadcast(bcast, n - 1);

  const double rank_sum = n * (n - 1) / 2.0;
  EXPECT_EQ(sum.to_doubles(), (std::vector<double>{rank_sum, double(n), 2 * rank_sum}));
  EXPECT_EQ(max.to_doubles(), (std::vector<double>{double(n - 1), 0.0}));
  std::vector<double> g = gathered.to_doubles();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(g[size_t(2 * r)], r * 10.0);
    EXPECT_EQ(g[size_t(2 * r + 1)], r * 10.0 + 1);
  }
  std::vector<double> s = scattered.to_doubles();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(s[size_t(i)], 100.0 * rank_sum + n * double(2 * me + i));
  EXPECT_EQ(bcast.to_doubles(), (std::vector<double>{double(n - 1), double(n - 1)}));
}

TEST(NcclCollectives, ParallelStateGroupsOnGpu) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one GPU per rank";
  World& w = World::instance();
  bb::dist::GroupSizes s;
  s.tp = 2;
  auto ps = bb::dist::ParallelState::create(w, s);
  Tensor t = on_gpu({double(w.rank())}, {1}, DType::F32);
  ps->tp().all_reduce(t);
  // tp groups are consecutive pairs {2k, 2k+1}.
  EXPECT_EQ(t.to_doubles()[0], 4.0 * (w.rank() / 2) + 1);
}
