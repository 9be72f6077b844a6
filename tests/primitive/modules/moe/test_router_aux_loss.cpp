// The router losses in the SparseMoE block, float64 on one rank: Megatron's
// per-layer load-balancing loss (its value by hand over two layers, its
// gradient by finite differences) and the router z-loss (likewise), and the
// load metrics the accumulator keeps per layer.
#include <gtest/gtest.h>

#include <cmath>

#include "../module_fixture.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 9, kHidden = 6, kFfn = 5, kExperts = 4, kTopK = 2;
constexpr double kTol = 1e-9;

struct Case {
  const char* name;
  RouterLossConfig cfg;
  double weight;
};

class RouterLosses : public ::testing::TestWithParam<Case> {};

// Two MoE layers in a row; the loss is a projection of the output plus what
// the accumulator adds (each coefficient x the microbatch weight x its value).
TEST_P(RouterLosses, TwoLayersMatchFiniteDifferences) {
  const Case c = GetParam();
  test::ModuleFixture fx;
  SparseMoEConfig first_cfg{kHidden, kFfn, kExperts, kTopK, true}, second_cfg = first_cfg;
  second_cfg.layer = 1;
  auto first = fx.make_sparse_moe(first_cfg, "layers.0.mlp.");
  auto second = fx.make_sparse_moe(second_cfg, "layers.1.mlp.");
  fx.allocate_and_init(61, 0.5);
  Generator gen(62);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    RouterAuxLoss aux(c.cfg, c.weight);
    SequenceLayout seq;
    seq.router_aux = &aux;
    std::unique_ptr<BlockState> s1, s2;
    const double l = test::project(second->forward(first->forward(x, seq, s1), seq, s2), proj);
    return l + aux.loss();
  };
  RouterAuxLoss aux(c.cfg, c.weight);
  SequenceLayout seq;
  seq.router_aux = &aux;
  std::unique_ptr<BlockState> s1, s2;
  second->forward(first->forward(x, seq, s1), seq, s2);
  aux.finish();

  // The values by hand from the saved routings.
  double megatron = 0, z = 0;
  for (const auto* s : {&s1, &s2}) {
    const Routing& r = static_cast<const SparseMoE::Saved&>(**s).routing;
    const std::vector<double> q = r.scores.to_doubles(), logits = r.logits.to_doubles();
    for (int64_t e = 0; e < kExperts; ++e) {
      double p = 0;
      for (int64_t t = 0; t < kTokens; ++t) p += q[size_t(t * kExperts + e)];
      megatron += double(kExperts) * double(r.rows_per_expert[size_t(e)]) * p / double(kTopK * kTokens * kTokens);
    }
    for (int64_t t = 0; t < kTokens; ++t) {
      double s = 0;
      for (int64_t e = 0; e < kExperts; ++e) s += std::exp(logits[size_t(t * kExperts + e)]);
      z += std::log(s) * std::log(s) / double(kTokens);
    }
  }
  if (c.cfg.aux && c.cfg.aux_type == AuxLossType::Megatron) EXPECT_NEAR(aux.value(), megatron, 1e-12);
  if (c.cfg.z_coeff != 0) EXPECT_NEAR(aux.z_value(), z, 1e-12);
  ASSERT_EQ(aux.loads().size(), 2u);
  EXPECT_EQ(aux.loads()[1].layer, 1);
  EXPECT_LE(aux.loads()[0].min_rows, aux.loads()[0].max_rows);

  Tensor dx = first->backward(second->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s2),
                              seq, s1);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, RouterLosses,
    ::testing::Values(Case{"Megatron", {true, AuxLossType::Megatron, 0.7, 0.0}, 0.6},
                      Case{"ZLoss", {false, AuxLossType::Hf, 0.0, 0.3}, 0.6},
                      Case{"HfWithZLoss", {true, AuxLossType::Hf, 0.7, 0.3}, 1.0},
                      Case{"MegatronWithZLoss", {true, AuxLossType::Megatron, 0.7, 0.3}, 0.6}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RouterAuxLoss, ParsesTheFormsAndNamesABadOne) {
  EXPECT_EQ(parse_aux_loss_type("hf"), AuxLossType::Hf);
  EXPECT_EQ(parse_aux_loss_type("megatron"), AuxLossType::Megatron);
  try {
    parse_aux_loss_type("switch");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_aux_loss_type 'switch' is not one of hf, megatron"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bb
