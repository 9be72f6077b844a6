// Float64 finite-difference checks of the pre-norm DecoderLayer on one rank:
// dx and every parameter's gradient (both norms, attention with GQA and q/k
// norm, the MLP) over packed sequences; recompute none, selective and full
// give the same outputs and gradients bit for bit; the bytes a layer keeps for
// backward under each selective module (the audit in docs/training.md).
#include <gtest/gtest.h>

#include "bumblebee/core/device_memory.h"

#include "module_fixture.h"

namespace bb {
namespace {

constexpr double kTol = 1e-9;
const std::vector<int64_t> kSeqLens{3, 7, 5};
constexpr int64_t kTokens = 15, kHidden = 8, kFfn = 12;

DecoderLayerConfig layer_config(RecomputeMode recompute) {
  DecoderLayerConfig cfg;
  cfg.attention.hidden = kHidden;
  cfg.attention.num_heads = 4;
  cfg.attention.num_kv_heads = 2;
  cfg.attention.head_dim = 4;
  cfg.attention.qk_norm = true;
  cfg.attention.recompute_core_attention = recompute == RecomputeMode::Selective;
  return cfg;
}

TEST(DecoderLayer, GradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  auto layer = fx.make_decoder_layer(layer_config(RecomputeMode::None), kFfn, RecomputeMode::None);
  fx.allocate_and_init(51);
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  Generator gen(52);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(layer->forward(x, seq, s), proj);
  };

  std::unique_ptr<BlockState> s;
  layer->forward(x, seq, s);
  Tensor dx = layer->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(DecoderLayer, RecomputeModesGiveIdenticalGradients) {
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  Generator gen(53);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden}), dy = test::random_tensor(gen, {kTokens, kHidden});
  const RecomputeMode modes[] = {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full};
  std::vector<double> y[3], dx[3];
  std::vector<std::vector<double>> grads[3];
  for (int m = 0; m < 3; ++m) {
    test::ModuleFixture fx;
    auto layer = fx.make_decoder_layer(layer_config(modes[m]), kFfn, modes[m]);
    fx.allocate_and_init(54);
    std::unique_ptr<BlockState> s;
    y[m] = layer->forward(x, seq, s).to_doubles();
    dx[m] = layer->backward(dy, seq, s).to_doubles();
    for (Parameter& p : fx.params()) grads[m].push_back(p.grad.to_doubles());
  }
  for (int m = 1; m < 3; ++m) {
    EXPECT_EQ(y[m], y[0]) << "mode " << m;
    EXPECT_EQ(dx[m], dx[0]) << "mode " << m;
    EXPECT_EQ(grads[m], grads[0]) << "mode " << m;
  }
}

struct Kept {
  size_t bytes = 0;   // held by the layer's state after forward
  std::vector<double> dx;
  std::vector<std::vector<double>> grads;
};

Kept forward_backward_kept(const DecoderLayerConfig& cfg, bool recompute_mlp, const Tensor& x, const Tensor& dy) {
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  test::ModuleFixture fx;
  auto layer = fx.make_decoder_layer(cfg, kFfn, RecomputeMode::None, "", recompute_mlp);
  fx.allocate_and_init(55);
  Kept k;
  const size_t before = device_bytes_in_use(Device::cpu());
  std::unique_ptr<BlockState> s;
  const Tensor y = layer->forward(x, seq, s);
  k.bytes = device_bytes_in_use(Device::cpu()) - before - y.storage()->nbytes();
  k.dx = layer->backward(dy, seq, s).to_doubles();
  for (Parameter& p : fx.params()) k.grads.push_back(p.grad.to_doubles());
  return k;
}

// Per token, in values (float64 here, statistics included): the input norm's
// rstd; the attention's input, q and k projections (the q/k norms' inputs)
// and their rstds, v, q and k after norm and RoPE, the output and its lse;
// the residual h (the pre-MLP norm's input) and its rstd; the MLP's input,
// gate_up and h. The `layernorm` module drops both norm outputs and q, k
// after RoPE; `mlp` drops h; `core_attn` the output and lse.
TEST(DecoderLayer, KeptBytesAreTheAuditsAndLayernormRecomputeGivesIdenticalGradients) {
  constexpr int64_t H = kHidden, Hq = 4, Hkv = 2, D = 4, F = kFfn;
  Generator gen(56);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden}), dy = test::random_tensor(gen, {kTokens, kHidden});
  const auto bytes = [](int64_t per_token) { return size_t(kTokens * per_token * 8); };
  const int64_t none_per_token = 1 + (H + 2 * Hq * D + 2 * Hkv * D + Hq + Hkv + Hkv * D + Hq * D + Hq) + (H + 1) +
                                 (H + 2 * F + F);
  const int64_t norms = 2 * H + (Hq + Hkv) * D;

  const Kept none = forward_backward_kept(layer_config(RecomputeMode::None), false, x, dy);
  EXPECT_EQ(none.bytes, bytes(none_per_token));
  const struct {
    const char* modules;
    bool core_attn, layernorm, mlp;
    int64_t dropped_per_token;
  } cases[] = {
      {"layernorm", false, true, false, norms},
      {"layernorm,mlp", false, true, true, norms + F},
      {"core_attn,layernorm,mlp", true, true, true, norms + F + Hq * D + Hq},
  };
  for (const auto& c : cases) {
    DecoderLayerConfig cfg = layer_config(RecomputeMode::None);
    cfg.attention.recompute_core_attention = c.core_attn;
    cfg.attention.recompute_qk_norm = c.layernorm;
    cfg.recompute_norms = c.layernorm;
    const Kept k = forward_backward_kept(cfg, c.mlp, x, dy);
    EXPECT_EQ(k.bytes, bytes(none_per_token - c.dropped_per_token)) << c.modules;
    EXPECT_EQ(k.dx, none.dx) << c.modules;
    EXPECT_EQ(k.grads, none.grads) << c.modules;
  }
}

}  // namespace
}  // namespace bb
