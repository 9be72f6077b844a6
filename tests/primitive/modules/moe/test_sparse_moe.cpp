// Float64 finite-difference checks of the SparseMoE block (router + experts)
// on one rank: dx, the router weight and every expert's weights, with and
// without renormalised top-k and the load-balancing auxiliary loss, and two
// layers coupled through one RouterAuxLoss; plus the block against a naive
// per-token evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../module_fixture.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 9, kHidden = 6, kFfn = 5, kExperts = 4, kTopK = 2;
constexpr double kTol = 1e-9, kAuxScale = 0.7;

struct Case {
  bool norm_topk_prob, aux;
};

class SparseMoEGradients : public ::testing::TestWithParam<Case> {};

TEST_P(SparseMoEGradients, MatchFiniteDifferences) {
  const Case c = GetParam();
  test::ModuleFixture fx;
  auto moe = fx.make_sparse_moe({kHidden, kFfn, kExperts, kTopK, c.norm_topk_prob});
  fx.allocate_and_init(51, 0.5);
  Generator gen(52);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    RouterAuxLoss aux(kAuxScale);
    SequenceLayout seq;
    if (c.aux) seq.router_aux = &aux;
    std::unique_ptr<BlockState> s;
    const double l = test::project(moe->forward(x, seq, s), proj);
    return l + (c.aux ? kAuxScale * aux.value() : 0.0);
  };

  RouterAuxLoss aux(kAuxScale);
  SequenceLayout seq;
  if (c.aux) seq.router_aux = &aux;
  std::unique_ptr<BlockState> s;
  moe->forward(x, seq, s);
  aux.finish();
  const auto& saved = static_cast<const SparseMoE::Saved&>(*s);
  for (int64_t e = 0; e < kExperts; ++e)
    ASSERT_GT(saved.offsets[size_t(e + 1)], saved.offsets[size_t(e)]) << "expert " << e << " got no token";
  Tensor dx = moe->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

INSTANTIATE_TEST_SUITE_P(Routers, SparseMoEGradients,
                         ::testing::Values(Case{false, false}, Case{true, false}, Case{false, true}, Case{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.norm_topk_prob ? "Renormalised" : "Raw") +
                                  (info.param.aux ? "WithAuxLoss" : "");
                         });

// The DeepSeek-V3 router in the block: sigmoid scores, the expert bias (a
// buffer: it steers the choice, so the loss is flat in it and its gradient
// stays 0), groups of two experts with one kept, a routed scaling factor.
TEST(SparseMoE, SigmoidGroupedRouterMatchesFiniteDifferences) {
  test::ModuleFixture fx;
  SparseMoEConfig cfg{kHidden, kFfn, kExperts, kTopK, true};
  cfg.score = ops::MoeScore::Sigmoid;
  cfg.num_groups = 2;
  cfg.topk_groups = 1;
  cfg.routed_scaling_factor = 2.5;
  auto moe = fx.make_sparse_moe(cfg, "mlp.");
  const Parameter* bias = nullptr;
  for (const Parameter& p : fx.params())
    if (p.name == "mlp.gate.e_score_correction_bias") bias = &p;
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->cls, ParamClass::Buffer);
  EXPECT_EQ(bias->full_shape, (Shape{kExperts}));
  fx.allocate_and_init(57, 0.5);
  Generator gen(58);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  SequenceLayout seq;
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(moe->forward(x, seq, s), proj);
  };
  std::unique_ptr<BlockState> s;
  moe->forward(x, seq, s);
  Tensor dx = moe->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(SparseMoE, SoftmaxRouterHasNoExpertBias) {
  test::ModuleFixture fx;
  auto moe = fx.make_sparse_moe({kHidden, kFfn, kExperts, kTopK, true}, "mlp.");
  for (const Parameter& p : fx.params()) EXPECT_NE(p.name, "mlp.gate.e_score_correction_bias");
}

// Two MoE layers in a row share one accumulator: the aux loss's f and P count
// both layers' tokens, so each layer's router gradient depends on the other's routing.
TEST(SparseMoE, TwoLayersShareTheAuxLoss) {
  test::ModuleFixture fx;
  auto first = fx.make_sparse_moe({kHidden, kFfn, kExperts, kTopK, true}, "layers.0.mlp.");
  auto second = fx.make_sparse_moe({kHidden, kFfn, kExperts, kTopK, true}, "layers.1.mlp.");
  fx.allocate_and_init(53, 0.5);
  Generator gen(54);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    RouterAuxLoss aux(kAuxScale);
    SequenceLayout seq;
    seq.router_aux = &aux;
    std::unique_ptr<BlockState> s1, s2;
    const double l = test::project(second->forward(first->forward(x, seq, s1), seq, s2), proj);
    return l + kAuxScale * aux.value();
  };
  RouterAuxLoss aux(kAuxScale);
  SequenceLayout seq;
  seq.router_aux = &aux;
  std::unique_ptr<BlockState> s1, s2;
  second->forward(first->forward(x, seq, s1), seq, s2);
  aux.finish();
  Tensor dx = first->backward(second->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s2),
                              seq, s1);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

// y_t = sum over the k most probable experts of w_e * down_e(silu(gate_e x_t) * up_e x_t).
TEST(SparseMoE, ForwardMatchesNaive) {
  test::ModuleFixture fx;
  auto moe = fx.make_sparse_moe({kHidden, kFfn, kExperts, kTopK, true});
  fx.allocate_and_init(55, 0.5);
  Generator gen(56);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> vx = x.to_doubles(), wr = fx.param("gate.weight").value.to_doubles();
  std::vector<double> expect(size_t(kTokens * kHidden), 0.0);
  for (int64_t t = 0; t < kTokens; ++t) {
    std::vector<double> p(static_cast<size_t>(kExperts), 0.0);
    for (int64_t e = 0; e < kExperts; ++e)
      for (int64_t i = 0; i < kHidden; ++i) p[size_t(e)] += vx[size_t(t * kHidden + i)] * wr[size_t(e * kHidden + i)];
    const double m = *std::max_element(p.begin(), p.end());
    double z = 0;
    for (double& v : p) z += (v = std::exp(v - m));
    for (double& v : p) v /= z;
    std::vector<int64_t> order = {0, 1, 2, 3};
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    const double sum = p[size_t(order[0])] + p[size_t(order[1])];
    for (int64_t j = 0; j < kTopK; ++j) {
      const int64_t e = order[size_t(j)];
      const std::string name = "experts." + std::to_string(e) + ".";
      const std::vector<double> wg = fx.param(name + "gate_proj.weight").value.to_doubles(),
                                wu = fx.param(name + "up_proj.weight").value.to_doubles(),
                                wd = fx.param(name + "down_proj.weight").value.to_doubles();
      for (int64_t f = 0; f < kFfn; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < kHidden; ++i) {
          g += vx[size_t(t * kHidden + i)] * wg[size_t(f * kHidden + i)];
          u += vx[size_t(t * kHidden + i)] * wu[size_t(f * kHidden + i)];
        }
        const double h = g / (1.0 + std::exp(-g)) * u * p[size_t(e)] / sum;
        for (int64_t o = 0; o < kHidden; ++o) expect[size_t(t * kHidden + o)] += h * wd[size_t(o * kFfn + f)];
      }
    }
  }
  std::unique_ptr<BlockState> s;
  EXPECT_LT(test::relative_error(moe->forward(x, SequenceLayout{}, s).to_doubles(), expect), 1e-14);
}

TEST(SparseMoE, ExpertParametersAreTheirOwnClass) {
  test::ModuleFixture fx;
  auto moe = fx.make_sparse_moe({kHidden, kFfn, kExperts, kTopK, false}, "mlp.");
  EXPECT_EQ(fx.param("mlp.gate.weight").cls, ParamClass::Dense);
  EXPECT_EQ(fx.param("mlp.experts.3.down_proj.weight").cls, ParamClass::Expert);
  EXPECT_EQ(fx.param("mlp.experts.0.gate_proj.weight").full_shape, (Shape{kFfn, kHidden}));
}

TEST(SparseMoE, RejectsTopKAboveTheExpertCount) {
  test::ModuleFixture fx;
  try {
    fx.make_sparse_moe({kHidden, kFfn, kExperts, kExperts + 1, false});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_experts_per_tok 5 must lie in [1, num_experts = 4]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bb
