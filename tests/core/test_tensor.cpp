// Tests of core/tensor: shapes, views (view, narrow, flat_slice) sharing
// storage, copies and casts (including bf16/f16 rounding), and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "bumblebee/core/tensor.h"

namespace bb {
namespace {

Tensor iota(int64_t n, DType dt = DType::F64) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i);
  return Tensor::from_doubles(v, {n}, dt);
}

TEST(Tensor, ShapeBasics) {
  EXPECT_EQ(shape_str({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 0, 5}), 0);
  Tensor t = Tensor::zeros({2, 3, 4}, DType::F32);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_THROW(t.size(3), Error);
  EXPECT_THROW(t.size(-4), Error);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, ZerosFillAndItem) {
  Tensor t = Tensor::zeros({3}, DType::F64);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 0, 0}));
  t.fill_(2.5);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_THROW(t.item(), Error);
  EXPECT_EQ(t.narrow(1, 1).item(), 2.5);
  EXPECT_THROW(Tensor::empty({2, -1}, DType::F32), Error);
}

TEST(Tensor, ViewSharesStorageAndInfersOneDimension) {
  Tensor t = iota(12);
  Tensor v = t.view({-1, 4});
  EXPECT_EQ(v.shape(), (Shape{3, 4}));
  EXPECT_TRUE(v.shares_storage(t));
  v.data<double>()[5] = 100.0;
  EXPECT_EQ(t.to_doubles()[5], 100.0);
  EXPECT_THROW(t.view({5, 2}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.view({-1, 5}), Error);
}

TEST(Tensor, NarrowSelectsRowsOfTheFirstDimension) {
  Tensor t = iota(12).view({4, 3});
  Tensor rows = t.narrow(1, 2);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.to_doubles(), (std::vector<double>{3, 4, 5, 6, 7, 8}));
  rows.fill_(-1.0);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 1, 2, -1, -1, -1, -1, -1, -1, 9, 10, 11}));
  EXPECT_EQ(t.narrow(4, 0).numel(), 0);
  EXPECT_EQ(rows.narrow(1, 1).to_doubles(), (std::vector<double>(3, -1.0)));  // narrow of a narrow
  EXPECT_THROW(t.narrow(3, 2), Error);
  EXPECT_THROW(t.narrow(-1, 1), Error);
}

TEST(Tensor, FlatSliceIsAnElementRange) {
  Tensor t = iota(10);
  Tensor s = t.flat_slice(3, {2, 2});
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{3, 4, 5, 6}));
  s.zero_();
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 1, 2, 0, 0, 0, 0, 7, 8, 9}));
  EXPECT_THROW(t.flat_slice(8, {3}), Error);
  EXPECT_EQ(t.narrow(2, 5).flat_slice(1, {2}).to_doubles(), (std::vector<double>{0, 0}));
}

TEST(Tensor, CloneAndCopyAreIndependent) {
  Tensor t = iota(4);
  Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage(t));
  c.fill_(9.0);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 1, 2, 3}));
  Tensor f = Tensor::empty({2, 2}, DType::F32);
  f.copy_from(t);  // same numel, other shape and dtype
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_THROW(f.copy_from(iota(5)), Error);
  EXPECT_TRUE(t.to(DType::F64).shares_storage(t));  // no-op cast returns the same tensor
  EXPECT_TRUE(t.to(Device::cpu()).shares_storage(t));
}

TEST(Tensor, FloatCastsRoundToNearest) {
  Tensor t = Tensor::from_doubles({0.1, 1.0 / 3.0, -7.25}, {3}, DType::F64);
  const std::vector<double> back = t.to(DType::F32).to(DType::F64).to_doubles();
  EXPECT_EQ(back, (std::vector<double>{double(0.1f), double(1.0f / 3.0f), -7.25}));
}

TEST(Tensor, Bfloat16RoundTripAndTiesToEven) {
  // Exactly representable values survive; bf16 keeps 8 significant bits.
  const std::vector<double> exact{1.0, -2.5, 0.15625, 256.0, -0.0, 3.0e38};
  Tensor e = Tensor::from_doubles(exact, {6}, DType::F64).to(DType::BF16);
  EXPECT_EQ(e.nbytes(), 12u);
  const std::vector<double> e_back = e.to_doubles();
  for (size_t i = 0; i < exact.size() - 1; ++i) EXPECT_EQ(e_back[i], exact[i]);
  EXPECT_NEAR(e_back[5], 3.0e38, 3.0e38 / 128);
  const double ulp = std::ldexp(1.0, -7);
  Tensor r = Tensor::from_doubles({1.0 + ulp / 2, 1.0 + 3 * ulp / 2, 1.0 + ulp / 2 + ulp / 8}, {3}, DType::BF16);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{1.0, 1.0 + 2 * ulp, 1.0 + ulp}));
  Tensor nan = Tensor::from_doubles({std::numeric_limits<double>::quiet_NaN()}, {1}, DType::BF16);
  EXPECT_TRUE(std::isnan(nan.item()));
}

TEST(Tensor, Float16RoundTripRangeAndSubnormals) {
  const double ulp = std::ldexp(1.0, -10);
  Tensor t = Tensor::from_doubles({1.0 + ulp / 2, 1.0 + 3 * ulp / 2, 65504.0, 1e5, std::ldexp(1.0, -24),
                                   std::ldexp(1.0, -26), -0.5},
                                  {7}, DType::F16);
  const std::vector<double> back = t.to_doubles();
  EXPECT_EQ(back[0], 1.0);              // tie to even
  EXPECT_EQ(back[1], 1.0 + 2 * ulp);    // tie to even
  EXPECT_EQ(back[2], 65504.0);          // the largest finite half
  EXPECT_TRUE(std::isinf(back[3]));     // overflow
  EXPECT_EQ(back[4], std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(back[5], 0.0);              // underflow
  EXPECT_EQ(back[6], -0.5);
  // float16 -> bfloat16 -> float64 through the cast paths.
  EXPECT_EQ(t.narrow(6, 1).to(DType::BF16).item(), -0.5);
}

TEST(Tensor, IntegerDtypesAndFromVector) {
  Tensor i32 = Tensor::from_doubles({-3, 7, 2147483647}, {3}, DType::I32);
  EXPECT_EQ(i32.data<int32_t>()[2], 2147483647);
  Tensor big = Tensor::from_vector<int64_t>({(int64_t(1) << 62) + 1, -5}, {2});
  EXPECT_EQ(big.dtype(), DType::I64);
  Tensor big_copy = big.clone();
  EXPECT_EQ(big_copy.data<int64_t>()[0], (int64_t(1) << 62) + 1);  // no trip through double
  Tensor narrowed = Tensor::from_vector<int64_t>({1, 2, 3}, {3}).to(DType::I32);
  EXPECT_EQ(narrowed.data<int32_t>()[2], 3);
  EXPECT_EQ(narrowed.to(DType::I64).data<int64_t>()[1], 2);
  Tensor u8 = Tensor::from_doubles({0, 255}, {2}, DType::U8);
  EXPECT_EQ(u8.to_doubles(), (std::vector<double>{0, 255}));
}

TEST(Tensor, ErrorsNameTheProblem) {
  Tensor t = Tensor::zeros({2, 2}, DType::F32);
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_THROW(Tensor::from_doubles({1, 2, 3}, {2, 2}, DType::F32), Error);
  EXPECT_THROW((Tensor::from_vector<float>({1.0f}, {2})), Error);
  try {
    check_shape(t, {2, 3}, "my_op: weight");
    FAIL() << "check_shape accepted a wrong shape";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("my_op: weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 2]"), std::string::npos) << msg;
  }
  EXPECT_THROW(check_dtype(t, DType::F64, "x"), Error);
  EXPECT_NO_THROW(check_dtype(t, DType::F32, "x"));
  EXPECT_NO_THROW(check_same_device(t, Tensor::zeros({1}, DType::F64), "x"));
  EXPECT_THROW(check_shape(Tensor(), {1}, "x"), Error);
}

// Shapes whose element or byte count would wrap are refused, naming the shape,
// before any allocation (a wrapped count once made an init loop run for ever).
TEST(Tensor, OverflowingShapesAreRefusedBeforeAllocation) {
  const int64_t big = int64_t(1) << 62;
  struct Row {
    std::function<void()> make;
    std::string words;
  };
  const std::vector<Row> rows = {
      {[] { shape_numel({int64_t(1) << 32, int64_t(1) << 32}); }, "shape [4294967296, 4294967296] has more elements"},
      {[=] { shape_numel({big, 4}); }, "shape [4611686018427387904, 4] has more elements than int64"},
      {[=] { Tensor::empty({big, 48}, DType::F32); }, "shape [4611686018427387904, 48] has more elements"},
      {[=] { Tensor::zeros({big}, DType::F32); }, "a float32 tensor of shape [4611686018427387904] would take more"},
      {[] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 20}, DType::BF16); }, "would take more than"},
      {[] { Tensor::empty({2, -3}, DType::F32); }, "negative dimension in shape [2, -3]"},
  };
  for (const Row& r : rows) {
    try {
      r.make();
      ADD_FAILURE() << "no error, expected '" << r.words << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(r.words), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(Tensor::empty({0, big}, DType::F64).numel(), 0);
}

}  // namespace
}  // namespace bb
