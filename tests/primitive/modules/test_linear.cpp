// Float64 finite-difference checks of ColumnParallelLinear and
// RowParallelLinear on one rank: dx and dW of y = x W^T, and the accumulation
// rules (dW always accumulates; dx accumulates on request).
#include <gtest/gtest.h>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 7, kIn = 6, kOut = 5;
constexpr double kTol = 1e-9;

TEST(ColumnParallelLinear, GradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  auto linear = fx.make_column_linear(kIn, kOut);
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

// The shared-input projections of a block add their dx into one tensor.
TEST(ColumnParallelLinear, AccumulatesDxOnRequestAndDwAlways) {
  test::ModuleFixture fx;
  auto linear = fx.make_column_linear(kIn, kOut);
  fx.allocate_and_init(13);
  Generator gen(14);
  Tensor x = test::random_tensor(gen, {kTokens, kIn}), dy = test::random_tensor(gen, {kTokens, kOut});
  Tensor dx_once;
  linear->backward(dy, x, dx_once, false);
  const std::vector<double> dw_once = linear->weight().grad.to_doubles();
  Tensor dx = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> dx_before = dx.to_doubles();
  linear->backward(dy, x, dx, true);
  EXPECT_LT(test::relative_error(test::subtract(dx.to_doubles(), dx_before), dx_once.to_doubles()), 1e-14);
  std::vector<double> twice = dw_once;
  for (double& g : twice) g *= 2.0;
  EXPECT_LT(test::relative_error(linear->weight().grad.to_doubles(), twice), 1e-14);
}

TEST(RowParallelLinear, GradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  auto linear = fx.make_row_linear(kIn, kOut);
  fx.allocate_and_init(21);
  Generator gen(22);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = [&] { return test::project(linear->forward(x), proj); };

  Tensor dx = linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(RowParallelLinear, WeightGradientAccumulatesOverBackwards) {
  test::ModuleFixture fx;
  auto linear = fx.make_row_linear(kIn, kOut);
  fx.allocate_and_init(23);
  Generator gen(24);
  Tensor x = test::random_tensor(gen, {kTokens, kIn}), dy = test::random_tensor(gen, {kTokens, kOut});
  const std::vector<double> dx_once = linear->backward(dy, x).to_doubles();
  std::vector<double> twice = linear->weight().grad.to_doubles();
  for (double& g : twice) g *= 2.0;
  EXPECT_EQ(linear->backward(dy, x).to_doubles(), dx_once);
  EXPECT_LT(test::relative_error(linear->weight().grad.to_doubles(), twice), 1e-14);
}

}  // namespace
}  // namespace bb
