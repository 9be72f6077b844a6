// LoRA adapters (primitive/modules/lora.h) in float64 on one rank: the
// gradients of x, W, A and B through column- and row-parallel layers, the
// fused gate|up MLP and self-attention against finite differences (every
// matrix random, B too, so no term vanishes); a fresh adapter (B = 0) leaves
// the layer's output as it was; the scaling rules; and the configuration
// errors (unknown module, rank 0 or above min(in, out)).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 7, kIn = 6, kOut = 5;
constexpr double kTol = 1e-9;

LoraConfig lora(std::vector<std::string> targets, int64_t rank = 3, double alpha = 5.0) {
  LoraConfig cfg;
  cfg.target_modules = std::move(targets);
  cfg.rank = rank;
  cfg.alpha = alpha;
  return cfg;
}

TEST(LoraAdapter, DeclaresPeftNamedParametersBesideTheBaseWeight) {
  test::ModuleFixture fx;
  fx.set_lora(lora({"q_proj"}));
  auto q = fx.make_column_linear(kIn, kOut, "model.layers.0.self_attn.q_proj.weight");
  auto k = fx.make_column_linear(kIn, kOut, "model.layers.0.self_attn.k_proj.weight");
  fx.allocate_and_init(1);
  ASSERT_NE(q->lora(), nullptr);
  EXPECT_EQ(k->lora(), nullptr);
  EXPECT_EQ(q->lora()->A().name, "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(q->lora()->B().name, "model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(q->lora()->A().full_shape, (Shape{3, kIn}));
  EXPECT_EQ(q->lora()->B().full_shape, (Shape{kOut, 3}));
  EXPECT_TRUE(is_lora_param(q->lora()->A().name));
  EXPECT_FALSE(is_lora_param(q->weight().name));
}

TEST(LoraAdapter, ColumnParallelGradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  fx.set_lora(lora({"q_proj"}));
  auto linear = fx.make_column_linear(kIn, kOut, "q_proj.weight");
  fx.allocate_and_init(11);
  Generator gen(12);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = [&] { return test::project(linear->forward(x), proj); };
  Tensor dx;
  linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x, dx, false);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(LoraAdapter, RowParallelGradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  LoraConfig cfg = lora({"o_proj"}, 2, 3.0);
  cfg.use_rslora = true;
  fx.set_lora(cfg);
  auto linear = fx.make_row_linear(kIn, kOut, "o_proj.weight");
  fx.allocate_and_init(21);
  Generator gen(22);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = [&] { return test::project(linear->forward(x), proj); };
  Tensor dx = linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

// DoRA's backward treats ||W + s B A|| as a constant (peft detaches it), so
// finite differences run on that function: the layer's output with its
// columns rescaled by ||.|| now / ||.|| at the point the gradient was taken,
// which is m / ||.||_0 (x W^T + s x A^T B^T).
std::function<double()> dora_detached_loss(const std::function<Tensor()>& forward, const std::vector<double>& proj,
                                           LoraAdapter& a, Parameter& w, double scaling) {
  const std::vector<double> norm0 = dora_weight_norm(w.value, a.A().value, a.B().value, scaling, nullptr);
  return [&, forward, proj, norm0, scaling] {
    const std::vector<double> y = forward().to_doubles();
    const std::vector<double> norm = dora_weight_norm(w.value, a.A().value, a.B().value, scaling, nullptr);
    const size_t out = norm.size();
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += proj[i] * y[i] * norm[i % out] / norm0[i % out];
    return l;
  };
}

// m away from its init value ||W + s B A|| so that g != 1 in every column.
void perturb_magnitude(Parameter& m, Generator& gen) {
  std::vector<double> v = m.value.to_doubles();
  for (double& e : v) e *= 0.5 + gen.uniform();
  m.value.copy_from(Tensor::from_doubles(v, m.value.shape(), DType::F64));
}

TEST(DoraAdapter, ColumnParallelGradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  LoraConfig cfg = lora({"q_proj"});
  cfg.use_dora = true;
  fx.set_lora(cfg);
  auto linear = fx.make_column_linear(kIn, kOut, "q_proj.weight");
  fx.allocate_and_init(41);
  Generator gen(42);
  ASSERT_NE(linear->lora()->magnitude(), nullptr);
  EXPECT_EQ(linear->lora()->magnitude()->name, "q_proj.lora_magnitude_vector");
  EXPECT_TRUE(is_lora_param("q_proj.lora_magnitude_vector"));
  perturb_magnitude(*linear->lora()->magnitude(), gen);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = dora_detached_loss([&] { return linear->forward(x); }, proj, *linear->lora(), linear->weight(),
                                 cfg.scaling());
  Tensor dx;
  linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x, dx, false);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(DoraAdapter, RowParallelGradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  LoraConfig cfg = lora({"o_proj"}, 2, 3.0);
  cfg.use_dora = true;
  fx.set_lora(cfg);
  auto linear = fx.make_row_linear(kIn, kOut, "o_proj.weight");
  fx.allocate_and_init(51);
  Generator gen(52);
  perturb_magnitude(*linear->lora()->magnitude(), gen);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = dora_detached_loss([&] { return linear->forward(x); }, proj, *linear->lora(), linear->weight(),
                                 cfg.scaling());
  Tensor dx = linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

// y = (m / ||W + s B A||) (x W^T + s x A^T B^T) by hand, and m initialised
// to the norm leaves the adapted layer's output unscaled.
TEST(DoraAdapter, OutputIsTheNormalisedDirectionTimesTheMagnitude) {
  test::ModuleFixture fx;
  LoraConfig cfg = lora({"q_proj"}, 2, 6.0);
  cfg.use_dora = true;
  fx.set_lora(cfg);
  auto linear = fx.make_column_linear(kIn, kOut, "q_proj.weight");
  fx.allocate_and_init(61);
  Generator gen(62);
  LoraAdapter& a = *linear->lora();
  const std::vector<double> w = linear->weight().value.to_doubles(), av = a.A().value.to_doubles(),
                            bv = a.B().value.to_doubles();
  std::vector<double> v(kOut * kIn), norm(kOut, 0.0);
  for (int64_t o = 0; o < kOut; ++o)
    for (int64_t i = 0; i < kIn; ++i) {
      double ba = 0;
      for (int64_t k = 0; k < 2; ++k) ba += bv[o * 2 + k] * av[k * kIn + i];
      v[o * kIn + i] = w[o * kIn + i] + 3.0 * ba;
      norm[o] += v[o * kIn + i] * v[o * kIn + i];
    }
  for (double& n : norm) n = std::sqrt(n);
  init_dora_magnitudes(fx.store(), fx.tp());
  const std::vector<double> m_init = a.magnitude()->value.to_doubles();
  for (int64_t o = 0; o < kOut; ++o) EXPECT_NEAR(m_init[o], norm[o], 1e-12);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> xv = x.to_doubles();
  auto expect_output = [&](const std::vector<double>& m) {
    const std::vector<double> y = linear->forward(x).to_doubles();
    for (int64_t t = 0; t < kTokens; ++t)
      for (int64_t o = 0; o < kOut; ++o) {
        double z = 0;
        for (int64_t i = 0; i < kIn; ++i) z += xv[t * kIn + i] * v[o * kIn + i];
        EXPECT_NEAR(y[t * kOut + o], m[o] / norm[o] * z, 1e-12);
      }
  };
  expect_output(m_init);
  perturb_magnitude(*a.magnitude(), gen);
  expect_output(a.magnitude()->value.to_doubles());
}

TEST(LoraAdapter, OutputIsBasePlusScaledLowRankProduct) {
  test::ModuleFixture fx;
  fx.set_lora(lora({"q_proj"}, 2, 6.0));
  auto linear = fx.make_column_linear(kIn, kOut, "q_proj.weight");
  fx.allocate_and_init(31);
  Generator gen(32);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> xv = x.to_doubles(), w = linear->weight().value.to_doubles(),
                            a = linear->lora()->A().value.to_doubles(), b = linear->lora()->B().value.to_doubles();
  const std::vector<double> y = linear->forward(x).to_doubles();
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t o = 0; o < kOut; ++o) {
      double expect = 0.0;
      for (int64_t i = 0; i < kIn; ++i) expect += xv[t * kIn + i] * w[o * kIn + i];
      for (int64_t r = 0; r < 2; ++r) {
        double u = 0.0;
        for (int64_t i = 0; i < kIn; ++i) u += xv[t * kIn + i] * a[r * kIn + i];
        expect += 3.0 * u * b[o * 2 + r];   // alpha / r = 6 / 2
      }
      EXPECT_NEAR(y[t * kOut + o], expect, 1e-12);
    }
}

TEST(LoraAdapter, FreshAdapterLeavesTheOutputUnchanged) {
  test::ModuleFixture base, adapted;
  adapted.set_lora(lora({"all-linear"}));
  auto plain = base.make_row_linear(kIn, kOut, "down_proj.weight");
  auto with = adapted.make_row_linear(kIn, kOut, "down_proj.weight");
  base.allocate_and_init(41);
  adapted.allocate_and_init(41);
  init_lora_params(adapted.store(), 7);
  EXPECT_EQ(with->lora()->B().value.to_doubles(), std::vector<double>(kOut * 3, 0.0));
  const double bound = 1.0 / std::sqrt(double(kIn));
  for (double a : with->lora()->A().value.to_doubles()) EXPECT_LE(std::abs(a), bound);
  Generator gen(42);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  EXPECT_EQ(with->forward(x).to_doubles(), plain->forward(x).to_doubles());
}

TEST(LoraAdapter, FusedGateUpAndDownGradientsMatchFiniteDifferences) {
  constexpr int64_t kHidden = 6, kFfn = 8;
  test::ModuleFixture fx;
  fx.set_lora(lora({"gate_proj", "up_proj", "down_proj"}));
  auto mlp = fx.make_mlp(kHidden, kFfn);
  fx.allocate_and_init(51);
  Generator gen(52);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(mlp->forward(x, SequenceLayout{}, s), proj);
  };
  std::unique_ptr<BlockState> s;
  mlp->forward(x, SequenceLayout{}, s);
  Tensor dx = mlp->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), SequenceLayout{}, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(LoraAdapter, OnlyUpProjAdaptedInTheFusedGemm) {
  constexpr int64_t kHidden = 6, kFfn = 8;
  test::ModuleFixture fx;
  fx.set_lora(lora({"up_proj"}));
  auto mlp = fx.make_mlp(kHidden, kFfn);
  fx.allocate_and_init(53);
  EXPECT_EQ(fx.store().find("up_proj.lora_A.weight") != nullptr, true);
  EXPECT_EQ(fx.store().find("gate_proj.lora_A.weight"), nullptr);
  Generator gen(54);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(mlp->forward(x, SequenceLayout{}, s), proj);
  };
  std::unique_ptr<BlockState> s;
  mlp->forward(x, SequenceLayout{}, s);
  mlp->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), SequenceLayout{}, s);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(LoraAdapter, AttentionProjectionsGradientsMatchFiniteDifferences) {
  AttentionConfig cfg;
  cfg.hidden = 8;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 4;
  cfg.qk_norm = true;
  test::ModuleFixture fx;
  fx.set_lora(lora({"all-linear"}, 2, 4.0));
  auto attn = fx.make_attention(cfg);
  fx.allocate_and_init(61);
  const SequenceLayout seq = test::packed_sequences({4, 3});
  Generator gen(62);
  Tensor x = test::random_tensor(gen, {kTokens, cfg.hidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * cfg.hidden);
  auto loss = [&] {
    SelfAttention::Saved s;
    return test::project(attn->forward(x, seq, s), proj);
  };
  SelfAttention::Saved s;
  attn->forward(x, seq, s);
  Tensor dx = attn->backward(Tensor::from_doubles(proj, {kTokens, cfg.hidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
  for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"})
    EXPECT_NE(fx.store().find(std::string(m) + ".lora_B.weight"), nullptr) << m;
}

TEST(LoraConfig, ScalingIsAlphaOverRankOrOverItsRoot) {
  LoraConfig cfg = lora({"q_proj"}, 4, 8.0);
  EXPECT_EQ(cfg.scaling(), 2.0);
  cfg.use_rslora = true;
  EXPECT_EQ(cfg.scaling(), 4.0);
}

TEST(LoraConfig, UnknownTargetModuleIsAnErrorListingTheValidOnes) {
  try {
    check_lora_config(lora({"q_proj", "qkv_proj"}));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'qkv_proj'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gate_proj"), std::string::npos) << msg;
  }
}

TEST(LoraConfig, RankZeroOrAboveTheLayerIsAnError) {
  EXPECT_THROW(check_lora_config(lora({"q_proj"}, 0)), Error);
  test::ModuleFixture fx;
  fx.set_lora(lora({"q_proj"}, kOut + 1));
  try {
    fx.make_column_linear(kIn, kOut, "model.layers.0.self_attn.q_proj.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("peft.rank 6"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace bb
