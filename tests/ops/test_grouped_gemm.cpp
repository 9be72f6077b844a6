// Tests of ops::grouped_gemm and ops::grouped_gemm_weight_grad on the CPU:
// each group against a plain ops::matmul on its rows, in both weight layouts
// and with alpha/beta, groups without rows (also all of them, and no groups),
// and errors for offsets and shapes that do not fit.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

// Row offsets of groups with these row counts.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets{0};
  for (int64_t c : counts) offsets.push_back(offsets.back() + c);
  return offsets;
}

std::vector<Tensor> random_matrices(Generator& gen, size_t count, const Shape& shape, DType dt) {
  std::vector<Tensor> w;
  for (size_t g = 0; g < count; ++g) w.push_back(test::random_tensor(gen, shape, dt));
  return w;
}

struct Case {
  DType dtype;
  std::vector<int64_t> counts;
};

class OpsGroupedGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(OpsGroupedGemmTest, ForwardAndInputGradMatchPerGroupGemms) {
  const Case c = GetParam();
  const double tol = c.dtype == DType::F64 ? 1e-13 : 1e-5;
  const std::vector<int64_t> offsets = offsets_of(c.counts);
  const int64_t rows = offsets.back(), k = 6, n = 5;
  Generator gen(21);
  for (bool trans_w : {true, false}) {
    const std::vector<Tensor> w = random_matrices(gen, c.counts.size(), trans_w ? Shape{n, k} : Shape{k, n}, c.dtype);
    Tensor a = test::random_tensor(gen, {rows, k}, c.dtype);
    Tensor out = test::random_tensor(gen, {rows, n}, c.dtype);
    Tensor expected = out.clone();
    for (size_t g = 0; g < w.size(); ++g) {
      const int64_t first = offsets[g], count = offsets[g + 1] - first;
      if (count == 0) continue;
      Tensor e_g = expected.narrow(first, count);
      ops::matmul(a.narrow(first, count), false, w[g], trans_w, e_g, 0.7, 0.3);
    }
    ops::grouped_gemm(a, w, trans_w, offsets, out, 0.7, 0.3);
    EXPECT_LT(test::relative_error(out.to_doubles(), expected.to_doubles()), tol) << "trans_w=" << trans_w;
  }
}

TEST_P(OpsGroupedGemmTest, WeightGradAccumulatesPerGroupGemms) {
  const Case c = GetParam();
  const double tol = c.dtype == DType::F64 ? 1e-13 : 1e-5;
  const std::vector<int64_t> offsets = offsets_of(c.counts);
  const int64_t rows = offsets.back(), k = 4, n = 7;
  Generator gen(22);
  Tensor dy = test::random_tensor(gen, {rows, n}, c.dtype), x = test::random_tensor(gen, {rows, k}, c.dtype);
  for (double beta : {1.0, 0.5, 0.0}) {
    const std::vector<Tensor> dw = random_matrices(gen, c.counts.size(), {n, k}, c.dtype);
    std::vector<Tensor> expected;
    for (size_t g = 0; g < dw.size(); ++g) {
      const int64_t first = offsets[g], count = offsets[g + 1] - first;
      expected.push_back(dw[g].clone());
      if (count == 0) {
        ops::scale_(expected.back(), beta);
        continue;
      }
      ops::matmul(dy.narrow(first, count), true, x.narrow(first, count), false, expected.back(), 1.0, beta);
    }
    ops::grouped_gemm_weight_grad(dy, x, offsets, dw, 1.0, beta);
    for (size_t g = 0; g < dw.size(); ++g) {
      EXPECT_LT(test::relative_error(dw[g].to_doubles(), expected[g].to_doubles()), tol)
          << "group " << g << " beta=" << beta;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, OpsGroupedGemmTest,
    ::testing::Values(Case{DType::F64, {3, 0, 5, 1}}, Case{DType::F32, {3, 0, 5, 1}}, Case{DType::F64, {0, 0, 7, 0}},
                      Case{DType::F64, {0, 0, 0}}, Case{DType::F64, {}}, Case{DType::F32, {2, 9}}),
    [](const auto& info) { return std::to_string(info.index) + dtype_name(info.param.dtype); });

// With every group empty nothing is written (c keeps what it held: no rows
// to write), and accumulated weight gradients are left as they were.
TEST(OpsGroupedGemm, AllGroupsEmptyTouchNothing) {
  Generator gen(23);
  const std::vector<int64_t> offsets{0, 0, 0};
  const std::vector<Tensor> w = random_matrices(gen, 2, {3, 4}, DType::F64);
  Tensor a = Tensor::empty({0, 4}, DType::F64), c = Tensor::empty({0, 3}, DType::F64);
  ops::grouped_gemm(a, w, true, offsets, c);
  const std::vector<double> before = w[0].to_doubles();
  Tensor dy = Tensor::empty({0, 3}, DType::F64);
  ops::grouped_gemm_weight_grad(dy, a, offsets, w);
  EXPECT_EQ(w[0].to_doubles(), before);
}

TEST(OpsGroupedGemm, RejectsOffsetsAndShapesThatDoNotFit) {
  Generator gen(24);
  const std::vector<Tensor> w = random_matrices(gen, 2, {3, 4}, DType::F64);
  Tensor a = test::random_tensor(gen, {5, 4}), c = Tensor::empty({5, 3}, DType::F64);
  EXPECT_THROW(ops::grouped_gemm(a, w, true, {0, 5}, c), Error);        // 2 groups need 3 offsets
  EXPECT_THROW(ops::grouped_gemm(a, w, true, {0, 3, 2}, c), Error);     // decreasing, ends short
  EXPECT_THROW(ops::grouped_gemm(a, w, true, {1, 3, 5}, c), Error);     // does not start at 0
  EXPECT_THROW(ops::grouped_gemm(a, w, true, {0, 3, 4}, c), Error);     // ends before the rows do
  EXPECT_THROW(ops::grouped_gemm(a, w, false, {0, 3, 5}, c), Error);    // w is [3, 4], not [4, 3]
  const std::vector<Tensor> w32 = random_matrices(gen, 2, {3, 4}, DType::F32);
  EXPECT_THROW(ops::grouped_gemm(a, w32, true, {0, 3, 5}, c), Error);   // mixed dtypes on the CPU
  Tensor dy = test::random_tensor(gen, {5, 3});
  EXPECT_THROW(ops::grouped_gemm_weight_grad(dy, a, {0, 3, 5}, {w[0], Tensor()}), Error);  // undefined dw[1]
}

}  // namespace
}  // namespace bb
