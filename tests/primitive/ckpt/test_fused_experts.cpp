// Tests of FusedExpertSink: per-expert tensors regrouped into transformers 5's
// fused layout ([E, 2I, H] gate then up rows per expert, [E, H, I]), other
// tensors passed through in order, incomplete or repeated layers refused.
#include "bumblebee/primitive/ckpt/fused_experts.h"

#include <gtest/gtest.h>

#include "tests/primitive/ckpt/ckpt_test_util.h"

namespace bb {
namespace {

using testing::expect_error;

constexpr int64_t E = 3, I = 2, H = 4;
const std::string kPrefix = "model.layers.1.mlp.experts.";

// Expert e's tensor `proj` filled with e * 100 + proj * 10 + element index.
Tensor expert_tensor(int64_t e, int proj) {
  const int64_t rows = proj == 2 ? H : I, cols = proj == 2 ? I : H;
  std::vector<double> v(size_t(rows * cols));
  for (size_t k = 0; k < v.size(); ++k) v[k] = double(e * 100 + proj * 10) + double(k);
  return Tensor::from_doubles(v, {rows, cols}, DType::F32);
}

const char* kProj[] = {"gate_proj", "up_proj", "down_proj"};

void feed_layer(FusedExpertSink& sink) {
  for (int64_t e = 0; e < E; ++e)
    for (int j = 0; j < 3; ++j) sink(kPrefix + std::to_string(e) + "." + kProj[j] + ".weight", expert_tensor(e, j));
}

TEST(FusedExpertSink, RegroupsEachExpertsGateThenUpRowsAndItsDownMatrix) {
  std::vector<std::pair<std::string, Tensor>> out;
  FusedExpertSink sink({{kPrefix, E}}, [&](const std::string& n, const Tensor& t) { out.emplace_back(n, t.clone()); });
  sink("model.embed_tokens.weight", Tensor::zeros({2, 2}, DType::F32));
  feed_layer(sink);
  sink("model.layers.0.mlp.experts.0.gate_proj.weight", expert_tensor(0, 0));   // a layer stored per expert
  sink.finish();
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].first, "model.embed_tokens.weight");
  EXPECT_EQ(out[1].first, kPrefix + "gate_up_proj");
  EXPECT_EQ(out[2].first, kPrefix + "down_proj");
  EXPECT_EQ(out[3].first, "model.layers.0.mlp.experts.0.gate_proj.weight");
  EXPECT_EQ(out[1].second.shape(), (Shape{E, 2 * I, H}));
  EXPECT_EQ(out[2].second.shape(), (Shape{E, H, I}));
  const std::vector<double> gu = out[1].second.to_doubles(), down = out[2].second.to_doubles();
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<double> gate = expert_tensor(e, 0).to_doubles(), up = expert_tensor(e, 1).to_doubles(),
                              dn = expert_tensor(e, 2).to_doubles();
    for (int64_t k = 0; k < I * H; ++k) {
      EXPECT_EQ(gu[size_t(e * 2 * I * H + k)], gate[size_t(k)]);
      EXPECT_EQ(gu[size_t(e * 2 * I * H + I * H + k)], up[size_t(k)]);
    }
    for (int64_t k = 0; k < H * I; ++k) EXPECT_EQ(down[size_t(e * H * I + k)], dn[size_t(k)]);
  }
}

TEST(FusedExpertSink, AnIncompleteLayerIsAnErrorNamingTheMissingTensor) {
  FusedExpertSink sink({{kPrefix, E}}, [](const std::string&, const Tensor&) {});
  for (int j = 0; j < 3; ++j) sink(kPrefix + "0." + kProj[j] + ".weight", expert_tensor(0, j));
  expect_error([&] { sink.finish(); }, {"model.layers.1.mlp.experts.1.gate_proj.weight"});
}

TEST(FusedExpertSink, ATensorArrivingTwiceOrAfterItsLayerIsAnError) {
  FusedExpertSink sink({{kPrefix, E}}, [](const std::string&, const Tensor&) {});
  sink(kPrefix + "0.gate_proj.weight", expert_tensor(0, 0));
  expect_error([&] { sink(kPrefix + "0.gate_proj.weight", expert_tensor(0, 0)); }, {"arrived twice"});
  FusedExpertSink done({{kPrefix, E}}, [](const std::string&, const Tensor&) {});
  feed_layer(done);
  expect_error([&] { done(kPrefix + "2.up_proj.weight", expert_tensor(2, 1)); }, {"after its layer was written"});
}

}  // namespace
}  // namespace bb
