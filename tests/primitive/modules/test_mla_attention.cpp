// Float64 finite-difference checks of multi-head latent attention on one
// rank: dx and every parameter's gradient, with and without the low-rank q
// path, the interleaved and the rotate-half rope layout, yarn's cos/sin
// factor, and a v head dim equal to or different from the q/k head dim.
#include <gtest/gtest.h>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr double kTol = 1e-9;
const std::vector<int64_t> kSeqLens{3, 6, 4};
constexpr int64_t kTokens = 13, kHidden = 8;

MLAConfig mla_config(int64_t q_lora_rank, int64_t v_head_dim, bool interleave, double rope_scale) {
  MLAConfig cfg;
  cfg.hidden = kHidden;
  cfg.num_heads = 4;
  cfg.q_lora_rank = q_lora_rank;
  cfg.kv_lora_rank = 6;
  cfg.qk_nope_head_dim = 4;
  cfg.qk_rope_head_dim = 4;
  cfg.v_head_dim = v_head_dim;
  cfg.softmax_scale = 0.4;
  cfg.rope_scale = rope_scale;
  cfg.rope_interleave = interleave;
  return cfg;
}

void expect_gradients_match(const MLAConfig& cfg, uint64_t seed) {
  test::ModuleFixture fx;
  RopeConfig rope;
  rope.theta = 100.0;
  auto attn = fx.make_mla_attention(cfg, rope);
  fx.allocate_and_init(seed);
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  Generator gen(seed + 1);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(attn->forward(x, seq, s), proj);
  };
  std::unique_ptr<BlockState> s;
  attn->forward(x, seq, s);
  Tensor dx = attn->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(MLAttention, LowRankQGradientsMatchFiniteDifferences) { expect_gradients_match(mla_config(5, 8, true, 1.0), 61); }

TEST(MLAttention, QProjGradientsMatchFiniteDifferences) { expect_gradients_match(mla_config(0, 8, true, 1.0), 62); }

TEST(MLAttention, RotateHalfRopeAndYarnFactorGradientsMatchFiniteDifferences) {
  expect_gradients_match(mla_config(5, 8, false, 1.3), 63);
}

TEST(MLAttention, VHeadDimBelowQkGradientsMatchFiniteDifferences) {
  expect_gradients_match(mla_config(5, 6, true, 1.0), 64);
}

// HF's parameter order: the q path, the compressed kv path, o_proj.
TEST(MLAttention, DeclaresHfNamesInModuleOrder) {
  test::ModuleFixture fx;
  fx.make_mla_attention(mla_config(5, 6, true, 1.0));
  std::vector<std::string> names;
  for (Parameter& p : fx.params()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight",
                                             "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight",
                                             "kv_b_proj.weight", "o_proj.weight"}));
}

}  // namespace
}  // namespace bb
