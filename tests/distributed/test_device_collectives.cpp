// NCCL point-to-point and all_to_all on a group of one GPU, without MPI: the
// host group is a single-rank Communicator, so every message is to this rank
// itself. Skipped without NCCL or a GPU; the multi-rank cases are in
// tests/mpi/test_p2p_all_to_all_nccl.cpp.
#include "bumblebee/distributed/device_collectives.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/ops/op_profile.h"

using bb::Device;
using bb::DType;
using bb::Tensor;
using bb::dist::P2POp;

namespace {

bool profiled(const std::vector<bb::ops::profile::OpTime>& times, const std::string& name) {
  return std::any_of(times.begin(), times.end(),
                     [&](const auto& t) { return t.name == name && t.communication && t.calls > 0; });
}

}  // namespace

TEST(NcclOneGpuGroup, SelfMessagesAndAllToAllInTheProfile) {
#ifndef BB_WITH_NCCL
  GTEST_SKIP() << "this build has no NCCL";
#else
  if (bb::cuda_device_count() < 1) GTEST_SKIP() << "needs a GPU";
  auto host_group = bb::dist::make_single_rank_communicator("pp");
  auto nccl = bb::dist::make_nccl_collectives(*host_group, 0);
  const Device gpu = Device::cuda(0);
  bb::ops::profile::set_enabled(true);
  bb::ops::profile::take();

  // Two messages to itself, matched in order; an empty one is skipped on both sides.
  Tensor first = Tensor::from_doubles({1, 2, 3, 4}, {2, 2}, DType::BF16).to(gpu);
  Tensor second = Tensor::from_doubles({5, 6, 7}, {3}, DType::F64).to(gpu);
  Tensor empty = Tensor::zeros({0, 2}, DType::F32, gpu), empty_in = Tensor::zeros({0, 2}, DType::F32, gpu);
  Tensor got_first = Tensor::zeros({2, 2}, DType::BF16, gpu), got_second = Tensor::zeros({3}, DType::F64, gpu);
  nccl->batch_isend_irecv({P2POp::send(first, 0), P2POp::send(empty, 0), P2POp::send(second, 0),
                           P2POp::recv(got_first, 0), P2POp::recv(empty_in, 0), P2POp::recv(got_second, 0)})
      ->wait();

  Tensor in = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {3, 1, 2}, DType::F32).to(gpu);
  Tensor out = Tensor::zeros({3, 1, 2}, DType::F32, gpu);
  nccl->all_to_all(in, {3}, out, {3});
  Tensor none = Tensor::zeros({0, 2}, DType::I64, gpu), none_out = Tensor::zeros({0, 2}, DType::I64, gpu);
  nccl->all_to_all(none, {0}, none_out, {0});
  const std::vector<bb::ops::profile::OpTime> times = bb::ops::profile::take();
  bb::ops::profile::set_enabled(false);

  EXPECT_EQ(got_first.to_doubles(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(got_second.to_doubles(), (std::vector<double>{5, 6, 7}));
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(profiled(times, "nccl send_recv [pp]"));
  EXPECT_TRUE(profiled(times, "nccl all_to_all [pp]"));
#endif
}
