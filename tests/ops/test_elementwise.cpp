// Tests of the elementwise ops on the CPU: add, mul, add_ (also across
// dtypes), scale_, and their shape and dtype errors.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

TEST(OpsElementwise, AddAndMulMatchNaive) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(21);
    Tensor a = test::random_tensor(gen, {3, 5}, dt), b = test::random_tensor(gen, {3, 5}, dt);
    Tensor sum = Tensor::empty({3, 5}, dt), prod = Tensor::empty({3, 5}, dt);
    ops::add(a, b, sum);
    ops::mul(a, b, prod);
    const std::vector<double> va = a.to_doubles(), vb = b.to_doubles(), vs = sum.to_doubles(),
                              vp = prod.to_doubles();
    for (size_t i = 0; i < va.size(); ++i) {
      // Exact: one rounding of the exact result, whose inputs are exact in dt.
      EXPECT_EQ(vs[i], dt == DType::F64 ? va[i] + vb[i] : double(float(va[i] + vb[i])));
      EXPECT_EQ(vp[i], dt == DType::F64 ? va[i] * vb[i] : double(float(va[i] * vb[i])));
    }
  }
}

TEST(OpsElementwise, AddInPlaceAcrossDtypes) {
  Tensor acc64 = Tensor::from_doubles({1.0, 2.0, 3.0}, {3}, DType::F64);
  Tensor x32 = Tensor::from_doubles({0.5, -1.0, 0.25}, {3}, DType::F32);
  ops::add_(acc64, x32, 2.0);
  EXPECT_EQ(acc64.to_doubles(), (std::vector<double>{2.0, 0.0, 3.5}));
  Tensor acc32 = Tensor::from_doubles({1.0, 2.0, 3.0}, {3}, DType::F32);
  Tensor x64 = Tensor::from_doubles({0.1, 0.2, 0.3}, {3}, DType::F64);
  ops::add_(acc32, x64, -1.0);
  // Formed in double, rounded once to float.
  EXPECT_EQ(acc32.to_doubles(), (std::vector<double>{double(float(1.0 - 0.1)), double(float(2.0 - 0.2)),
                                                     double(float(3.0 - 0.3))}));
  ops::add_(acc64, acc64);  // acc may be x: doubles it
  EXPECT_EQ(acc64.to_doubles(), (std::vector<double>{4.0, 0.0, 7.0}));
}

TEST(OpsElementwise, ScaleInPlace) {
  Tensor x = Tensor::from_doubles({1.5, -2.0, 0.0, 4.0}, {2, 2}, DType::F64);
  ops::scale_(x, -0.5);
  EXPECT_EQ(x.to_doubles(), (std::vector<double>{-0.75, 1.0, -0.0, -2.0}));
  Tensor y = Tensor::from_doubles({3.0}, {1}, DType::F32);
  ops::scale_(y, 1.0 / 3.0);
  EXPECT_EQ(y.item(), double(float(3.0 * (1.0 / 3.0))));
}

TEST(OpsElementwise, RejectsBadShapesAndDtypes) {
  Tensor a = Tensor::zeros({2, 3}, DType::F64), b = Tensor::zeros({3, 2}, DType::F64);
  Tensor out = Tensor::zeros({2, 3}, DType::F64);
  EXPECT_THROW(ops::add(a, b, out), Error);
  EXPECT_THROW(ops::mul(a, b, out), Error);
  EXPECT_THROW(ops::add_(out, b), Error);
  Tensor a32 = Tensor::zeros({2, 3}, DType::F32);
  EXPECT_THROW(ops::add(a, a32, out), Error);  // one dtype per CPU call
  Tensor ints = Tensor::zeros({2, 3}, DType::I32);
  EXPECT_THROW(ops::scale_(ints, 2.0), Error);
  EXPECT_THROW(ops::add_(out, ints), Error);
  Tensor bf = Tensor::zeros({2, 3}, DType::BF16);
  EXPECT_THROW(ops::add_(bf, a), Error);
}

}  // namespace
}  // namespace bb
