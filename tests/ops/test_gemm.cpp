// Tests of ops::matmul on the CPU: every transpose combination against a naive
// triple loop, alpha/beta, the empty inner dimension, and shape errors.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

// c = alpha * op(a) op(b) + beta * c, written out.
std::vector<double> naive_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha,
                               double beta) {
  const std::vector<double> va = a.to_doubles(), vb = b.to_doubles(), vc = c.to_doubles();
  const int64_t m = c.size(0), n = c.size(1), k = ta ? a.size(0) : a.size(1);
  std::vector<double> out(size_t(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double x = ta ? va[size_t(l * a.size(1) + i)] : va[size_t(i * a.size(1) + l)];
        const double y = tb ? vb[size_t(j * b.size(1) + l)] : vb[size_t(l * b.size(1) + j)];
        s += x * y;
      }
      out[size_t(i * n + j)] = alpha * s + beta * vc[size_t(i * n + j)];
    }
  }
  return out;
}

class OpsGemmTest : public ::testing::TestWithParam<DType> {};

TEST_P(OpsGemmTest, AllTransposesMatchNaive) {
  const DType dt = GetParam();
  const double tol = dt == DType::F64 ? 1e-13 : 1e-5;
  Generator gen(11);
  const int64_t m = 5, n = 7, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = test::random_tensor(gen, ta ? Shape{k, m} : Shape{m, k}, dt);
      Tensor b = test::random_tensor(gen, tb ? Shape{n, k} : Shape{k, n}, dt);
      Tensor c = test::random_tensor(gen, {m, n}, dt);
      const std::vector<double> expected = naive_gemm(a, ta, b, tb, c, 0.7, 0.3);
      ops::matmul(a, ta, b, tb, c, 0.7, 0.3);
      EXPECT_LT(test::relative_error(c.to_doubles(), expected), tol) << "trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST_P(OpsGemmTest, BetaZeroIgnoresOldContents) {
  const DType dt = GetParam();
  Generator gen(12);
  Tensor a = test::random_tensor(gen, {4, 6}, dt), b = test::random_tensor(gen, {6, 2}, dt);
  Tensor c = Tensor::empty({4, 2}, dt);
  c.fill_(NAN);
  Tensor zero = Tensor::zeros({4, 2}, dt);
  const std::vector<double> expected = naive_gemm(a, false, b, false, zero, 1.0, 0.0);
  ops::matmul(a, false, b, false, c);
  EXPECT_LT(test::relative_error(c.to_doubles(), expected), dt == DType::F64 ? 1e-13 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsGemmTest, ::testing::Values(DType::F64, DType::F32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(OpsGemm, EmptyInnerDimensionScalesC) {
  Tensor a = Tensor::zeros({3, 0}, DType::F64), b = Tensor::zeros({0, 2}, DType::F64);
  Tensor c = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {3, 2}, DType::F64);
  ops::matmul(a, false, b, false, c, 1.0, 2.0);
  EXPECT_EQ(c.to_doubles(), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  ops::matmul(a, false, b, false, c, 1.0, 0.0);
  EXPECT_EQ(c.to_doubles(), (std::vector<double>(6, 0.0)));
}

TEST(OpsGemm, RejectsBadShapesAndDtypes) {
  Tensor a = Tensor::zeros({3, 4}, DType::F64), b = Tensor::zeros({5, 2}, DType::F64);
  Tensor c = Tensor::zeros({3, 2}, DType::F64);
  EXPECT_THROW(ops::matmul(a, false, b, false, c), Error);  // inner 4 vs 5
  Tensor b_ok = Tensor::zeros({4, 2}, DType::F64);
  Tensor c_bad = Tensor::zeros({2, 3}, DType::F64);
  EXPECT_THROW(ops::matmul(a, false, b_ok, false, c_bad), Error);
  Tensor a3 = Tensor::zeros({1, 3, 4}, DType::F64);
  EXPECT_THROW(ops::matmul(a3, false, b_ok, false, c), Error);
  Tensor b32 = Tensor::zeros({4, 2}, DType::F32);
  EXPECT_THROW(ops::matmul(a, false, b32, false, c), Error);
  Tensor undefined;
  EXPECT_THROW(ops::matmul(a, false, undefined, false, c), Error);
  try {
    ops::matmul(a, false, b, false, c);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
