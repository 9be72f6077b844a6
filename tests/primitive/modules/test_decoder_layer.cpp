// Float64 finite-difference checks of the pre-norm DecoderLayer on one rank:
// dx and every parameter's gradient (both norms, attention with GQA and q/k
// norm, the MLP) over packed sequences; recompute none, selective and full
// give the same outputs and gradients bit for bit.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bb
