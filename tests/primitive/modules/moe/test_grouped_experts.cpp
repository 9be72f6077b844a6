// Float64 finite-difference checks of GroupedExperts: dx and every expert's
// weights, with experts of several rows, one row and none (also all experts
// empty); the forward against each expert's SwiGLU MLP evaluated on its own
// rows; and the HF per-expert parameter names.
#include <gtest/gtest.h>

#include <cmath>

#include "../module_fixture.h"
#include "bumblebee/ops/ops.h"

namespace bb {
namespace {

constexpr int64_t kHidden = 6, kFfn = 5;
constexpr double kTol = 1e-9;

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets{0};
  for (int64_t c : counts) offsets.push_back(offsets.back() + c);
  return offsets;
}

class GroupedExpertsGradients : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(GroupedExpertsGradients, MatchFiniteDifferences) {
  const std::vector<int64_t> counts = GetParam();
  const std::vector<int64_t> offsets = offsets_of(counts);
  const int64_t rows = offsets.back();
  test::ModuleFixture fx;
  auto experts = fx.make_grouped_experts(2, int64_t(counts.size()), kHidden, kFfn);
  fx.allocate_and_init(61, 0.5);
  Generator gen(62);
  Tensor x = test::random_tensor(gen, {rows, kHidden});
  const std::vector<double> proj = test::random_vector(gen, size_t(rows * kHidden));
  auto loss = [&] {
    GroupedExperts::Saved s;
    return test::project(experts->forward(x, offsets, s), proj);
  };
  GroupedExperts::Saved s;
  experts->forward(x, offsets, s);
  // Two backwards: the weight gradients accumulate, so they are then twice the single ones.
  Tensor dx = experts->backward(Tensor::from_doubles(proj, {rows, kHidden}, DType::F64), s);
  experts->backward(Tensor::from_doubles(proj, {rows, kHidden}, DType::F64), s);
  for (Parameter& p : fx.params()) ops::scale_(p.grad, 0.5);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

INSTANTIATE_TEST_SUITE_P(RowsPerExpert, GroupedExpertsGradients,
                         ::testing::Values(std::vector<int64_t>{3, 0, 4, 1}, std::vector<int64_t>{0, 5, 0},
                                           std::vector<int64_t>{0, 0}),
                         [](const auto& info) { return "Case" + std::to_string(info.index); });

// Each expert's rows through down(silu(gate x) * up x), written out.
TEST(GroupedExperts, ForwardIsEachExpertsSwiGLUOnItsRows) {
  const std::vector<int64_t> offsets = offsets_of({2, 0, 3});
  test::ModuleFixture fx;
  auto experts = fx.make_grouped_experts(0, 3, kHidden, kFfn);
  fx.allocate_and_init(63, 0.5);
  Generator gen(64);
  Tensor x = test::random_tensor(gen, {offsets.back(), kHidden});
  GroupedExperts::Saved s;
  const std::vector<double> y = experts->forward(x, offsets, s).to_doubles();
  const std::vector<double> xv = x.to_doubles();
  for (int64_t e = 0; e < 3; ++e) {
    const std::string p = "experts." + std::to_string(e) + ".";
    const std::vector<double> gate = fx.param(p + "gate_proj.weight").value.to_doubles();
    const std::vector<double> up = fx.param(p + "up_proj.weight").value.to_doubles();
    const std::vector<double> down = fx.param(p + "down_proj.weight").value.to_doubles();
    for (int64_t r = offsets[size_t(e)]; r < offsets[size_t(e + 1)]; ++r) {
      std::vector<double> h(kFfn);
      for (int64_t i = 0; i < kFfn; ++i) {
        double g = 0.0, u = 0.0;
        for (int64_t j = 0; j < kHidden; ++j) {
          g += gate[size_t(i * kHidden + j)] * xv[size_t(r * kHidden + j)];
          u += up[size_t(i * kHidden + j)] * xv[size_t(r * kHidden + j)];
        }
        h[size_t(i)] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < kHidden; ++o) {
        double v = 0.0;
        for (int64_t i = 0; i < kFfn; ++i) v += down[size_t(o * kFfn + i)] * h[size_t(i)];
        EXPECT_NEAR(y[size_t(r * kHidden + o)], v, 1e-12) << "expert " << e << " row " << r << " out " << o;
      }
    }
  }
}

TEST(GroupedExperts, DeclaresHFPerExpertNamesInTheExpertClass) {
  test::ModuleFixture fx;
  fx.make_grouped_experts(4, 2, kHidden, kFfn, "model.layers.0.mlp.experts.");
  std::vector<std::string> names;
  for (const Parameter& p : fx.params()) {
    names.push_back(p.name);
    EXPECT_EQ(p.cls, ParamClass::Expert) << p.name;
  }
  const std::vector<std::string> expected{
      "model.layers.0.mlp.experts.4.gate_proj.weight", "model.layers.0.mlp.experts.4.up_proj.weight",
      "model.layers.0.mlp.experts.4.down_proj.weight", "model.layers.0.mlp.experts.5.gate_proj.weight",
      "model.layers.0.mlp.experts.5.up_proj.weight",   "model.layers.0.mlp.experts.5.down_proj.weight"};
  EXPECT_EQ(names, expected);
}

}  // namespace
}  // namespace bb
