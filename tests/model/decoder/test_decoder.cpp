// Decoder chunks: a model built as two pipeline stages (the first with the
// embedding and layers [0, k), the second with layers [k, L), the final norm
// and the head), run one after the other by hand, gives the whole model's
// per-token loss and gradients; each chunk declares and loads only its part.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/model/registry.h"
#include "bumblebee/runtime/microbatch.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

struct Built {
  std::shared_ptr<ModelProtocol> protocol;
  nlohmann::json config;
  std::unique_ptr<ModelChunk> chunk;
};

Built build(const std::string& fixture, const LayerRange& range) {
  const nlohmann::json hf = test::read_json(test::fixture_dir(fixture) + "/config.json");
  Built b;
  b.protocol = resolve_model("auto", "lite", hf.at("model_type").get<std::string>());
  b.config = b.protocol->build_model_config(hf, nlohmann::json::object());
  BuildContext ctx;
  ctx.parallel = std::make_shared<ParallelContext>(dist::ParallelState::single_rank());
  ctx.dtype = ctx.grad_dtype = ctx.residual_dtype = DType::F64;
  ctx.layers = range;
  b.chunk = b.protocol->build_model(b.config, ctx);
  b.chunk->init_weights(7);
  return b;
}

std::map<std::string, std::vector<double>> grads_of(ModelChunk& c) {
  std::map<std::string, std::vector<double>> out;
  for (Parameter& p : c.params().params()) out[p.name] = p.grad.to_doubles();
  return out;
}

class DecoderStages : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderStages, TwoChunksGiveTheWholeModelsLossAndGradients) {
  const std::string fixture = GetParam();
  Built whole = build(fixture, LayerRange{});
  const int64_t layers = whole.config.at("num_layers").get<int64_t>();
  ASSERT_GE(layers, 2);
  const int64_t k = layers / 2;
  Built first = build(fixture, LayerRange{0, k, true, false});
  Built last = build(fixture, LayerRange{k, -1, false, true});
  EXPECT_TRUE(first.chunk->is_first_stage() && !first.chunk->is_last_stage());
  EXPECT_TRUE(!last.chunk->is_first_stage() && last.chunk->is_last_stage());

  const PreparedMicroBatch pm =
      prepare_microbatch(test::fixture_batch(fixture), whole.chunk->vocab_size(), 1, Device::cpu(), DType::F64);
  const Tensor dloss = pm.device_loss_mask;

  std::unique_ptr<ForwardState> s_whole, s_first, s_last;
  const std::vector<double> loss_whole = whole.chunk->forward(pm.device, Tensor(), Tensor(), s_whole).to_doubles();
  whole.chunk->backward(pm.device, dloss, *s_whole, {});

  const Tensor hidden = first.chunk->forward(pm.device, Tensor(), Tensor(), s_first);
  const std::vector<double> loss_staged = last.chunk->forward(pm.device, hidden, Tensor(), s_last).to_doubles();
  const Tensor dhidden = last.chunk->backward(pm.device, dloss, *s_last, {});
  ASSERT_TRUE(dhidden.defined());
  EXPECT_FALSE(first.chunk->backward(pm.device, dhidden, *s_first, {}).defined());

  ASSERT_EQ(loss_whole.size(), loss_staged.size());
  for (size_t t = 0; t < loss_whole.size(); ++t) EXPECT_NEAR(loss_staged[t], loss_whole[t], 1e-12) << t;

  // Every parameter lives in exactly one chunk, but a tied embedding, which
  // both hold: its gradient is the sum of the two (what the pipeline's
  // embedding-group all-reduce computes).
  const auto g_whole = grads_of(*whole.chunk), g_first = grads_of(*first.chunk), g_last = grads_of(*last.chunk);
  const bool tied = whole.config.at("tie_word_embeddings").get<bool>();
  EXPECT_EQ(first.chunk->tied_params().size(), tied ? 1u : 0u);
  EXPECT_EQ(last.chunk->tied_params().size(), tied ? 1u : 0u);
  EXPECT_TRUE(whole.chunk->tied_params().empty());
  for (const auto& [name, expect] : g_whole) {
    const bool in_first = g_first.count(name), in_last = g_last.count(name);
    ASSERT_TRUE(in_first || in_last) << name;
    EXPECT_EQ(in_first && in_last, tied && name == "model.embed_tokens.weight") << name;
    std::vector<double> got(expect.size(), 0.0);
    for (const auto* part : {in_first ? &g_first.at(name) : nullptr, in_last ? &g_last.at(name) : nullptr})
      if (part)
        for (size_t i = 0; i < got.size(); ++i) got[i] += (*part)[i];
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(got[i] - expect[i]));
      ref = std::max(ref, std::abs(expect[i]));
    }
    EXPECT_LE(err, 1e-12 * std::max(ref, 1.0)) << name;
  }
  EXPECT_EQ(g_first.size() + g_last.size(), g_whole.size() + (tied ? 1 : 0));
}

TEST_P(DecoderStages, EachChunkLoadsItsOwnTensorsFromTheWholeCheckpoint) {
  const std::string fixture = GetParam();
  Built whole = build(fixture, LayerRange{});
  const int64_t k = whole.config.at("num_layers").get<int64_t>() / 2;
  const HFCheckpoint ckpt = HFCheckpoint::open(test::fixture_dir(fixture));
  whole.protocol->load_hf_weights(*whole.chunk, ckpt);
  for (const LayerRange& range : {LayerRange{0, k, true, false}, LayerRange{k, -1, false, true}}) {
    Built part = build(fixture, range);
    part.protocol->load_hf_weights(*part.chunk, ckpt);
    for (Parameter& p : part.chunk->params().params()) {
      const Parameter* w = whole.chunk->params().find(p.name);
      ASSERT_TRUE(w) << p.name;
      EXPECT_EQ(p.value.to_doubles(), w->value.to_doubles()) << p.name;
    }
    // Export streams the chunk's own tensors; a tied copy is the first stage's to export.
    std::vector<std::string> exported;
    ParallelContext pc(dist::ParallelState::single_rank());
    part.protocol->export_hf_weights(*part.chunk, pc, [&](const std::string& n, const Tensor&) { exported.push_back(n); });
    for (const std::string& n : exported) EXPECT_TRUE(ckpt.has(n)) << n;
    const bool has_embedding = std::find(exported.begin(), exported.end(), "model.embed_tokens.weight") != exported.end();
    EXPECT_EQ(has_embedding, range.pre_process);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderStages, ::testing::Values("qwen3_gqa", "llama3_tied_f16", "llama3_gqa"));

}  // namespace
}  // namespace bb
