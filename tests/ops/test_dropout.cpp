// Tests of the dropout mask op on the CPU: the share of dropped elements and
// the inverted scale (the mask's mean is 1), a column slice of a wider mask,
// the same key giving the same mask, p = 0, and the argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/dropout.h"
#include "bumblebee/ops/ops.h"

namespace bb {
namespace {

TEST(OpsDropout, DropsShareP_KeepsOneOverOneMinusP_MeanIsOne) {
  constexpr int64_t kRows = 200, kCols = 300;
  constexpr double kP = 0.3;
  Tensor mask = Tensor::empty({kRows, kCols}, DType::F64);
  ops::dropout_mask(mask, 77, kCols, 0, kP);
  double zeros = 0, sum = 0;
  for (double m : mask.to_doubles()) {
    if (m == 0.0) ++zeros;
    else EXPECT_EQ(m, 1.0 / (1.0 - kP));
    sum += m;
  }
  const double n = double(kRows * kCols);
  // Binomial share: 5 standard deviations of sqrt(p (1 - p) / n) ~ 0.0019 each.
  EXPECT_NEAR(zeros / n, kP, 5 * std::sqrt(kP * (1 - kP) / n));
  EXPECT_NEAR(sum / n, 1.0, 5 * std::sqrt(kP / (1 - kP) / n));
}

TEST(OpsDropout, ColumnSliceIsTheSliceOfTheWiderMask) {
  constexpr int64_t kRows = 9, kCols = 10, kOffset = 3, kWidth = 4;
  Tensor full = Tensor::empty({kRows, kCols}, DType::F32), part = Tensor::empty({kRows, kWidth}, DType::F32);
  ops::dropout_mask(full, 5, kCols, 0, 0.5);
  ops::dropout_mask(part, 5, kCols, kOffset, 0.5);
  const std::vector<double> f = full.to_doubles(), p = part.to_doubles();
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kWidth; ++j) EXPECT_EQ(p[size_t(i * kWidth + j)], f[size_t(i * kCols + kOffset + j)]);
}

TEST(OpsDropout, SameKeySameMaskOtherKeyOtherMask) {
  Tensor a = Tensor::empty({16, 16}, DType::F64), b = Tensor::empty({16, 16}, DType::F64),
         c = Tensor::empty({16, 16}, DType::F64);
  ops::dropout_mask(a, 1, 16, 0, 0.5);
  ops::dropout_mask(b, 1, 16, 0, 0.5);
  ops::dropout_mask(c, 2, 16, 0, 0.5);
  EXPECT_EQ(a.to_doubles(), b.to_doubles());
  EXPECT_NE(a.to_doubles(), c.to_doubles());
}

TEST(OpsDropout, ZeroPKeepsEverything) {
  Tensor mask = Tensor::empty({4, 5}, DType::F32);
  ops::dropout_mask(mask, 3, 5, 0, 0.0);
  EXPECT_EQ(mask.to_doubles(), std::vector<double>(20, 1.0));
}

TEST(OpsDropout, BadArgumentsAreErrors) {
  Tensor mask = Tensor::empty({4, 5}, DType::F32);
  EXPECT_THROW(ops::dropout_mask(mask, 3, 5, 0, 1.0), Error);
  EXPECT_THROW(ops::dropout_mask(mask, 3, 5, 0, -0.1), Error);
  EXPECT_THROW(ops::dropout_mask(mask, 3, 4, 0, 0.5), Error);   // row_stride below the columns
  Tensor flat = Tensor::empty({20}, DType::F32);
  EXPECT_THROW(ops::dropout_mask(flat, 3, 20, 0, 0.5), Error);
}

}  // namespace
}  // namespace bb
