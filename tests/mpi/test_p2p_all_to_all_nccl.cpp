// Point-to-point batches and all_to_all through NCCL, on CUDA tensors: one GPU
// per rank (cuda:local_rank). Skipped, on every rank together, unless every
// rank has its GPU; CPU-only builds compile it and skip.
#include <gtest/gtest.h>

#include <algorithm>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/ops/op_profile.h"
#include "tests/mpi/mpi_test_support.h"

using bb::Device;
using bb::DType;
using bb::Tensor;
using bb::dist::Communicator;
using bb::dist::P2POp;
using bb::dist::World;

using bb::test::every_rank_has_a_gpu;

namespace {

// Collective decision, so that no rank runs a collective the others skip.
Device my_gpu() { return Device::cuda(World::instance().local_rank()); }

// Small integers, exact in bfloat16: sender * 16 + receiver * 4 + element % 4.
std::vector<double> message_values(int from, int to, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = from * 16.0 + to * 4.0 + double(i % 4);
  return v;
}

Tensor message_on_gpu(int from, int to, const bb::Shape& shape, DType dt) {
  return Tensor::from_doubles(message_values(from, to, bb::shape_numel(shape)), shape, dt).to(my_gpu());
}

bool profiled(const std::vector<bb::ops::profile::OpTime>& times, const std::string& name) {
  return std::any_of(times.begin(), times.end(),
                     [&](const auto& t) { return t.name == name && t.communication && t.calls > 0; });
}

}  // namespace

// A pipeline step in both directions at once, then a ring, in bfloat16.
TEST(NcclP2P, NeighbourExchangeAndRing) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one GPU per rank";
  Communicator& c = World::instance().comm();
  const int n = c.size(), me = c.rank();
  bb::ops::profile::set_enabled(true);
  bb::ops::profile::take();
  Tensor act_in = Tensor::zeros({4, 2}, DType::BF16, my_gpu()), grad_in = Tensor::zeros({4, 2}, DType::F32, my_gpu());
  std::vector<P2POp> ops;
  if (me > 0) {
    ops.push_back(P2POp::recv(act_in, me - 1));
    ops.push_back(P2POp::send(message_on_gpu(me, me - 1, {4, 2}, DType::F32), me - 1));
  }
  if (me < n - 1) {
    ops.push_back(P2POp::send(message_on_gpu(me, me + 1, {4, 2}, DType::BF16), me + 1));
    ops.push_back(P2POp::recv(grad_in, me + 1));
  }
  c.batch_isend_irecv(ops)->wait();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Tensor ring_in = Tensor::zeros({3}, DType::I64, my_gpu());
  auto ring = c.batch_isend_irecv(
      {P2POp::send(message_on_gpu(me, next, {3}, DType::I64), next), P2POp::recv(ring_in, prev)});
  ring->wait();
  const std::vector<bb::ops::profile::OpTime> times = bb::ops::profile::take();
  bb::ops::profile::set_enabled(false);

  if (me > 0) EXPECT_EQ(act_in.to_doubles(), message_values(me - 1, me, 8));
  if (me < n - 1) EXPECT_EQ(grad_in.to_doubles(), message_values(me + 1, me, 8));
  EXPECT_EQ(ring_in.to_doubles(), message_values(prev, me, 3));
  EXPECT_TRUE(profiled(times, "nccl send_recv [world]"));
}

// Blocking forms are stream-ordered: even ranks send first, odd ranks receive first.
TEST(NcclP2P, BlockingSendAndRecv) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one GPU per rank";
  Communicator& c = World::instance().comm();
  const int n = c.size(), me = c.rank();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const int partner = me ^ 1;
  Tensor received = Tensor::zeros({5}, DType::F64, my_gpu());
  if (me % 2 == 0) {
    c.send(message_on_gpu(me, partner, {5}, DType::F64), partner);
    c.recv(received, partner);
  } else {
    c.recv(received, partner);
    c.send(message_on_gpu(me, partner, {5}, DType::F64), partner);
  }
  EXPECT_EQ(received.to_doubles(), message_values(partner, me, 5));
}

// Rank i sends (i + 2j) % 3 rows of shape [2] to rank j, zero included.
TEST(NcclAllToAll, UnevenAndZeroCounts) {
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one GPU per rank";
  Communicator& c = World::instance().comm();
  const int n = c.size(), me = c.rank();
  std::vector<int64_t> send_counts;
  std::vector<double> sent, expected;
  for (int j = 0; j < n; ++j) {
    send_counts.push_back((me + 2 * j) % 3);
    std::vector<double> to_j = message_values(me, j, 2 * send_counts.back());
    sent.insert(sent.end(), to_j.begin(), to_j.end());
    std::vector<double> from_j = message_values(j, me, 2 * ((j + 2 * me) % 3));
    expected.insert(expected.end(), from_j.begin(), from_j.end());
  }
  const std::vector<int64_t> recv_counts = c.all_to_all_counts(send_counts);
  int64_t out_rows = 0;
  for (int64_t r : recv_counts) out_rows += r;
  bb::ops::profile::set_enabled(true);
  bb::ops::profile::take();
  const Tensor in = Tensor::from_doubles(sent, {int64_t(sent.size()) / 2, 2}, DType::BF16).to(my_gpu());
  Tensor out = Tensor::zeros({out_rows, 2}, DType::BF16, my_gpu());
  c.all_to_all(in, send_counts, out, recv_counts);
  const std::vector<bb::ops::profile::OpTime> times = bb::ops::profile::take();
  bb::ops::profile::set_enabled(false);
  EXPECT_EQ(out.to_doubles(), expected);
  EXPECT_TRUE(profiled(times, "nccl all_to_all [world]"));
}
