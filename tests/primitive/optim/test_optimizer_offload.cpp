// Optimizer-state offload (primitive/optim/optimizer_offload.h): the host
// prefix of each group's shard, chosen by whole pieces in buffer order.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/primitive/optim/optimizer_offload.h"

namespace bb {
namespace {

TEST(OptimizerOffload, ZeroKeepsEverythingOnTheDeviceAndOneMovesEverything) {
  const std::vector<std::vector<int64_t>> ends = {{4, 10, 12}, {6, 8}};
  EXPECT_EQ(host_prefix_lengths(ends, {12, 12}, 0.0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(host_prefix_lengths(ends, {12, 12}, 1.0), (std::vector<int64_t>{12, 8}));
}

TEST(OptimizerOffload, WholePiecesAreOffloadedWhileBelowTheFraction) {
  // 20 elements in all: a half is 10, reached by the first group's first two pieces.
  const std::vector<std::vector<int64_t>> ends = {{4, 10, 12}, {6, 8}};
  EXPECT_EQ(host_prefix_lengths(ends, {12, 12}, 0.5), (std::vector<int64_t>{10, 0}));
  // Just above a half: the next piece goes too (Megatron offloads while below the threshold).
  EXPECT_EQ(host_prefix_lengths(ends, {12, 12}, 0.51), (std::vector<int64_t>{12, 0}));
  EXPECT_EQ(host_prefix_lengths(ends, {12, 12}, 0.7), (std::vector<int64_t>{12, 6}));
  // By bytes: a float64 group weighs twice a float32 one.
  EXPECT_EQ(host_prefix_lengths({{4}, {4}}, {24, 12}, 0.6), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(host_prefix_lengths({{4}, {4}}, {24, 12}, 0.7), (std::vector<int64_t>{4, 4}));
}

TEST(OptimizerOffload, AFractionOutsideZeroToOneNamesTheKey) {
  for (double f : {-0.1, 1.5}) {
    try {
      host_prefix_lengths({{4}}, {12}, f);
      ADD_FAILURE() << "no error for " << f;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer.offload_fraction must lie in [0, 1]"), std::string::npos)
          << e.what();
    }
  }
}

TEST(OptimizerOffload, HostBuffersHoldTheMasterDtypeAndStageTheParameterDtype) {
  const HostOptimizerState s = make_host_optimizer_state(8, DType::F32, DType::F32, DType::BF16, Device::cpu());
  EXPECT_EQ(s.master.dtype(), DType::F32);
  EXPECT_EQ(s.params.dtype(), DType::BF16);
  EXPECT_EQ(s.state_bytes(), 3u * 8 * 4);
  EXPECT_EQ(s.staging_bytes(), 8u * 4 + 8 * 2);
  EXPECT_FALSE(make_host_optimizer_state(8, DType::F64, DType::F64, DType::F64, Device::cpu()).params.defined());
  EXPECT_THROW(make_host_optimizer_state(8, DType::F32, DType::BF16, DType::BF16, Device::cpu()), Error);
}

TEST(OptimizerOffload, HostStepOnSeveralThreadsIsTheSingleThreadedStepBitForBit) {
  const int64_t n = (int64_t(1) << 20) + 37;   // four ranges of the threaded path, the last one short
  auto state = [&] {
    HostOptimizerState s = make_host_optimizer_state(n, DType::F32, DType::F32, DType::BF16, Device::cpu());
    std::vector<double> w(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      w[size_t(i)] = 0.01 * std::sin(double(i));
      g[size_t(i)] = std::cos(0.3 * double(i));
    }
    s.master.copy_from(Tensor::from_doubles(w, {n}, DType::F32));
    s.grad.copy_from(Tensor::from_doubles(g, {n}, DType::F32));
    return s;
  };
  HostOptimizerState one = state(), four = state();
  ops::AdamWParams hp;
  hp.grad_scale = 0.5;
  for (int64_t step = 1; step <= 2; ++step) {
    hp.step = step;
    host_adamw_step(one, hp, 1);
    host_adamw_step(four, hp, 4);
  }
  for (auto [a, b] : {std::pair{&one.master, &four.master}, {&one.exp_avg, &four.exp_avg},
                      {&one.exp_avg_sq, &four.exp_avg_sq}, {&one.params, &four.params}})
    EXPECT_EQ(a->to_doubles(), b->to_doubles());
  EXPECT_NE(one.params.to_doubles()[1], 0.0);
}

}  // namespace
}  // namespace bb
