// LoRA on the grouped experts' fused weights (primitive/modules/moe/expert_lora.h)
// in float64: dx and every expert's weights and adapters against finite
// differences (B random, experts with rows, one row and none); the forward
// against each expert's SwiGLU with W_e + s B_e A_e written out; the names;
// and the refusals peft's ParamWrapper shares (dropout, DoRA) and etp > 1.
#include <gtest/gtest.h>

#include <cmath>

#include "../module_fixture.h"
#include "bumblebee/ops/ops.h"

namespace bb {
namespace {

constexpr int64_t kHidden = 6, kFfn = 5, kRank = 2;
constexpr double kTol = 1e-9;

LoraConfig expert_lora(std::vector<std::string> params) {
  LoraConfig cfg;
  cfg.target_parameters = std::move(params);
  cfg.rank = kRank;
  cfg.alpha = 3.0;
  return cfg;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets{0};
  for (int64_t c : counts) offsets.push_back(offsets.back() + c);
  return offsets;
}

TEST(ExpertLora, DeclaresOnePairPerExpertAndFusedWeight) {
  test::ModuleFixture fx;
  fx.set_lora(expert_lora({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));
  auto experts = fx.make_grouped_experts(2, 2, kHidden, kFfn, "model.layers.0.mlp.experts.");
  fx.allocate_and_init(1);
  const Parameter* a = fx.store().find("model.layers.0.mlp.experts.3.gate_up_proj.lora_A.weight");
  const Parameter* b = fx.store().find("model.layers.0.mlp.experts.2.down_proj.lora_B.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->full_shape, (Shape{kRank, kHidden}));
  EXPECT_EQ(b->full_shape, (Shape{kHidden, kRank}));
  EXPECT_EQ(a->cls, ParamClass::Expert);
  EXPECT_EQ(fx.store().find("model.layers.0.mlp.experts.2.gate_proj.lora_A.weight"), nullptr);
}

class ExpertLoraGradients : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(ExpertLoraGradients, MatchFiniteDifferences) {
  const std::vector<int64_t> counts = GetParam();
  const std::vector<int64_t> offsets = offsets_of(counts);
  const int64_t rows = offsets.back();
  test::ModuleFixture fx;
  fx.set_lora(expert_lora({"gate_up_proj", "down_proj"}));
  auto experts = fx.make_grouped_experts(1, int64_t(counts.size()), kHidden, kFfn);
  fx.allocate_and_init(71, 0.5);
  Generator gen(72);
  Tensor x = test::random_tensor(gen, {rows, kHidden});
  const std::vector<double> proj = test::random_vector(gen, size_t(rows * kHidden));
  auto loss = [&] {
    GroupedExperts::Saved s;
    return test::project(experts->forward(x, offsets, s), proj);
  };
  GroupedExperts::Saved s;
  experts->forward(x, offsets, s);
  Tensor dx = experts->backward(Tensor::from_doubles(proj, {rows, kHidden}, DType::F64), s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

INSTANTIATE_TEST_SUITE_P(RowsPerExpert, ExpertLoraGradients,
                         ::testing::Values(std::vector<int64_t>{3, 0, 4, 1}, std::vector<int64_t>{0, 5, 0}),
                         [](const auto& info) { return "Case" + std::to_string(info.index); });

// y = (W_down + s B A)(silu(g) * u), [g; u] = (W_gate_up + s B A) x, for each expert's rows.
TEST(ExpertLora, ForwardIsEachExpertsSwiGLUWithTheMergedWeights) {
  const std::vector<int64_t> offsets = offsets_of({2, 0, 3});
  test::ModuleFixture fx;
  fx.set_lora(expert_lora({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));
  auto experts = fx.make_grouped_experts(0, 3, kHidden, kFfn);
  fx.allocate_and_init(73, 0.5);
  Generator gen(74);
  Tensor x = test::random_tensor(gen, {5, kHidden});
  GroupedExperts::Saved s;
  const std::vector<double> y = experts->forward(x, offsets, s).to_doubles(), xv = x.to_doubles();
  const double sc = 3.0 / kRank;
  auto merged = [&](const std::string& stem, int64_t out, int64_t in, const std::vector<double>& w) {
    const std::vector<double> a = fx.store().get(stem + ".lora_A.weight").value.to_doubles(),
                              b = fx.store().get(stem + ".lora_B.weight").value.to_doubles();
    std::vector<double> m = w;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t r = 0; r < kRank; ++r) m[size_t(o * in + i)] += sc * b[size_t(o * kRank + r)] * a[size_t(r * in + i)];
    return m;
  };
  for (int64_t e = 0; e < 3; ++e) {
    const std::string p = "experts." + std::to_string(e) + ".";
    std::vector<double> gu = fx.store().get(p + "gate_proj.weight").value.to_doubles();
    const std::vector<double> up = fx.store().get(p + "up_proj.weight").value.to_doubles();
    gu.insert(gu.end(), up.begin(), up.end());
    const std::vector<double> wgu = merged(p + "gate_up_proj", 2 * kFfn, kHidden, gu);
    const std::vector<double> wd = merged(p + "down_proj", kHidden, kFfn,
                                          fx.store().get(p + "down_proj.weight").value.to_doubles());
    for (int64_t t = offsets[size_t(e)]; t < offsets[size_t(e) + 1]; ++t) {
      std::vector<double> h(kFfn);
      for (int64_t f = 0; f < kFfn; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < kHidden; ++i) {
          g += wgu[size_t(f * kHidden + i)] * xv[size_t(t * kHidden + i)];
          u += wgu[size_t((kFfn + f) * kHidden + i)] * xv[size_t(t * kHidden + i)];
        }
        h[size_t(f)] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < kHidden; ++o) {
        double expect = 0;
        for (int64_t f = 0; f < kFfn; ++f) expect += wd[size_t(o * kFfn + f)] * h[size_t(f)];
        EXPECT_NEAR(y[size_t(t * kHidden + o)], expect, 1e-12) << "expert " << e << " row " << t;
      }
    }
  }
}

TEST(ExpertLora, DropoutDoraUnknownWeightAndEtpAreRefused) {
  LoraConfig cfg = expert_lora({"mlp.experts.gate_up_proj"});
  cfg.dropout = 0.1;
  EXPECT_THROW(check_lora_config(cfg), Error);
  cfg.dropout = 0.0;
  cfg.use_dora = true;
  EXPECT_THROW(check_lora_config(cfg), Error);
  try {
    check_lora_config(expert_lora({"mlp.experts.w1"}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mlp.experts.w1'"), std::string::npos) << e.what();
  }
  test::ModuleFixture fx;
  fx.set_lora(expert_lora({"down_proj"}));
  EXPECT_THROW(GroupedExperts(fx.store(), "experts.", 0, 2, kHidden, 4, false, {ShardKind::Column, 0, 2}), Error);
}

}  // namespace
}  // namespace bb
