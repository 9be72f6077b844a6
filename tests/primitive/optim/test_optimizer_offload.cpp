// Optimizer-state offload (primitive/optim/optimizer_offload.h): the host
// prefix of each group's shard, chosen by whole pieces in buffer order.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bb
