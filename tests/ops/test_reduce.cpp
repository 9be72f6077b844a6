// Tests of the host reductions on the CPU: sum and sum of squares (accumulated
// in double), zero count, both in one pass, and finiteness.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

TEST(OpsReduce, SumAndSumSquaresMatchNaive) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(31);
    Tensor x = test::random_tensor(gen, {7, 13}, dt);
    double s = 0.0, s2 = 0.0;
    for (double v : x.to_doubles()) {
      s += v;
      s2 += v * v;
    }
    EXPECT_NEAR(ops::sum(x), s, 1e-12 * 91);
    EXPECT_NEAR(ops::sum_squares(x), s2, 1e-12 * s2);
  }
}

TEST(OpsReduce, Float32AccumulatesInDouble) {
  // 2^24 + 1 + 1 + 1 + 1: a float accumulator would stay at 2^24.
  Tensor x = Tensor::from_doubles({16777216.0, 1.0, 1.0, 1.0, 1.0}, {5}, DType::F32);
  EXPECT_EQ(ops::sum(x), 16777220.0);
  Tensor y = Tensor::from_doubles({4096.0, 1.0, 1.0}, {3}, DType::F32);
  EXPECT_EQ(ops::sum_squares(y), 16777218.0);
}

TEST(OpsReduce, CountZerosAndAllFinite) {
  Tensor x = Tensor::from_doubles({0.0, -0.0, 1e-300, 3.0, 0.0}, {5}, DType::F64);
  EXPECT_EQ(ops::count_zeros(x), 3);
  EXPECT_TRUE(ops::all_finite(x));
  Tensor empty = Tensor::zeros({0}, DType::F32);
  EXPECT_EQ(ops::count_zeros(empty), 0);
  EXPECT_TRUE(ops::all_finite(empty));
  EXPECT_EQ(ops::sum(empty), 0.0);
  for (DType dt : {DType::F64, DType::F32}) {
    for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                       -std::numeric_limits<double>::infinity()}) {
      Tensor t = Tensor::from_doubles({1.0, bad, 2.0}, {3}, dt);
      EXPECT_FALSE(ops::all_finite(t)) << bad;
    }
  }
  // 1e39 overflows float32 when stored.
  EXPECT_FALSE(ops::all_finite(Tensor::from_doubles({1e39}, {1}, DType::F32)));
}

TEST(OpsReduce, SquaresAndZerosInOnePassEqualTheSingleReductions) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(37);
    std::vector<double> v = test::random_tensor(gen, {11, 9}, DType::F64).to_doubles();
    for (size_t i = 0; i < v.size(); i += 4) v[i] = 0.0;
    const Tensor x = Tensor::from_doubles(v, {11, 9}, dt);
    const ops::SquaresAndZeros both = ops::sum_squares_and_zeros(x);
    EXPECT_EQ(both.sum_squares, ops::sum_squares(x));
    EXPECT_EQ(both.zeros, ops::count_zeros(x));
    EXPECT_EQ(both.zeros, 25);
  }
  const ops::SquaresAndZeros empty = ops::sum_squares_and_zeros(Tensor::zeros({0}, DType::F32));
  EXPECT_EQ(empty.sum_squares, 0.0);
  EXPECT_EQ(empty.zeros, 0);
}

TEST(OpsReduce, RejectsNonFloatingAndUndefined) {
  EXPECT_THROW(ops::sum(Tensor::zeros({3}, DType::I64)), Error);
  EXPECT_THROW(ops::count_zeros(Tensor::zeros({3}, DType::BF16)), Error);
  EXPECT_THROW(ops::sum_squares(Tensor()), Error);
  EXPECT_THROW(ops::sum_squares_and_zeros(Tensor::zeros({3}, DType::I32)), Error);
}

}  // namespace
}  // namespace bb
