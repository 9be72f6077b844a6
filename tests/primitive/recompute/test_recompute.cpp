// Which layers a recompute configuration covers: selective parts per layer,
// counted from the chunk's first layer (so a pipeline stage or virtual chunk
// counts its own layers), and full recompute's runs (block: the first N
// layers one by one; uniform: every layer in runs of N).
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "bumblebee/primitive/recompute/recompute.h"

namespace bb {
namespace {

using Runs = std::vector<std::pair<int64_t, int64_t>>;

TEST(RecomputeConfig, SelectiveCountsTheChunksOwnLayers) {
  const RecomputeConfig c = parse_recompute("selective", "mlp,core_attn", "block", 2);
  LayerRange stage;
  stage.first_layer = 4;
  stage.end_layer = 8;
  for (int64_t layer : {4, 5}) {
    const SelectiveRecompute s = c.selective_for(layer, stage);
    EXPECT_TRUE(s.core_attn && s.mlp && !s.moe) << layer;
  }
  for (int64_t layer : {6, 7}) {
    const SelectiveRecompute s = c.selective_for(layer, stage);
    EXPECT_FALSE(s.core_attn || s.mlp || s.moe) << layer;
  }
}

TEST(RecomputeConfig, SelectiveDefaultsToCoreAttentionOnEveryLayer) {
  const RecomputeConfig c = parse_recompute("selective", "", "block", 0);
  for (int64_t layer = 0; layer < 5; ++layer) {
    const SelectiveRecompute s = c.selective_for(layer, LayerRange{});
    EXPECT_TRUE(s.core_attn && !s.mlp && !s.moe) << layer;
  }
  EXPECT_FALSE(parse_recompute("none", "", "block", 0).selective_for(0, LayerRange{}).core_attn);
  EXPECT_FALSE(parse_recompute("full", "", "block", 0).selective_for(0, LayerRange{}).core_attn);
}

TEST(RecomputeConfig, FullRunsByBlockAndUniform) {
  EXPECT_EQ(parse_recompute("full", "", "block", 0).full_runs(3), (Runs{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(parse_recompute("full", "", "block", 2).full_runs(5), (Runs{{0, 1}, {1, 2}}));
  EXPECT_EQ(parse_recompute("full", "", "block", 9).full_runs(2), (Runs{{0, 1}, {1, 2}}));
  EXPECT_EQ(parse_recompute("full", "", "uniform", 2).full_runs(5), (Runs{{0, 2}, {2, 4}, {4, 5}}));
  EXPECT_EQ(parse_recompute("full", "", "uniform", 1).full_runs(2), (Runs{{0, 1}, {1, 2}}));
  EXPECT_TRUE(parse_recompute("selective", "", "block", 0).full_runs(3).empty());
  EXPECT_TRUE(parse_recompute("full", "", "block", 0).full_runs(0).empty());
}

}  // namespace
}  // namespace bb
