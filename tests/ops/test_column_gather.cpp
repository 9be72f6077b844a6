// The column gather on the CPU: gather_columns equals a naive loop exactly,
// scatter_add_columns is its adjoint (<dy, G x> = <G^T dy, x> in float64),
// sums repeated columns and accumulates, and bad shapes or indices fail
// with a message naming them.
#include <gtest/gtest.h>

#include <string>

#include "bumblebee/core/error.h"
#include "bumblebee/ops/ops.h"
#include "op_error.h"
#include "finite_difference.h"

namespace bb {
namespace {

using test::error_of;

constexpr int64_t kRows = 5, kIn = 7;
// Repeats (column 2 three times, 6 twice), skips columns 1 and 4, unordered.
const std::vector<int64_t> kIndex{2, 0, 6, 2, 3, 5, 2, 6};
constexpr int64_t kOut = 8;

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(ColumnGather, GatherEqualsNaiveLoop) {
  for (DType dt : {DType::F32, DType::F64}) {
    Generator gen(81);
    const Tensor x = test::random_tensor(gen, {kRows, kIn}, dt);
    Tensor y = Tensor::empty({kRows, kOut}, dt);
    ops::gather_columns(x, ops::make_column_index(kIn, kIndex, Device::cpu()), y);
    const std::vector<double> xv = x.to_doubles(), yv = y.to_doubles();
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t j = 0; j < kOut; ++j)
        EXPECT_EQ(yv[size_t(r * kOut + j)], xv[size_t(r * kIn + kIndex[size_t(j)])]) << r << ", " << j;
  }
}

TEST(ColumnGather, ScatterIsTheAdjointOfGather) {
  Generator gen(82);
  const ops::ColumnIndex index = ops::make_column_index(kIn, kIndex, Device::cpu());
  const Tensor x = test::random_tensor(gen, {kRows, kIn});
  const Tensor dy = test::random_tensor(gen, {kRows, kOut});
  Tensor gx = Tensor::empty({kRows, kOut}, DType::F64);
  ops::gather_columns(x, index, gx);
  Tensor gtdy = Tensor::empty({kRows, kIn}, DType::F64);
  ops::scatter_add_columns(dy, index, gtdy, false);
  const double lhs = dot(dy.to_doubles(), gx.to_doubles()), rhs = dot(gtdy.to_doubles(), x.to_doubles());
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs));
}

TEST(ColumnGather, ScatterSumsRepeatsZeroesUnreadColumnsAndAccumulates) {
  Generator gen(83);
  const ops::ColumnIndex index = ops::make_column_index(kIn, kIndex, Device::cpu());
  const Tensor dy = test::random_tensor(gen, {kRows, kOut});
  const Tensor start = test::random_tensor(gen, {kRows, kIn});
  Tensor dx = Tensor::empty({kRows, kIn}, DType::F64);
  dx.fill_(123.0);  // overwritten, not read
  ops::scatter_add_columns(dy, index, dx, false);
  Tensor acc = start.clone();
  ops::scatter_add_columns(dy, index, acc, true);
  std::vector<double> expected(size_t(kRows * kIn), 0.0);
  const std::vector<double> d = dy.to_doubles();
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kOut; ++j) expected[size_t(r * kIn + kIndex[size_t(j)])] += d[size_t(r * kOut + j)];
  EXPECT_LT(test::relative_error(dx.to_doubles(), expected), 1e-15);
  EXPECT_EQ(dx.to_doubles()[1], 0.0);  // column 1 is read by no output
  EXPECT_LT(test::relative_error(test::subtract(acc.to_doubles(), start.to_doubles()), expected), 1e-14);
}

TEST(ColumnGather, ScatterMatchesFiniteDifferences) {
  Generator gen(84);
  const ops::ColumnIndex index = ops::make_column_index(kIn, kIndex, Device::cpu());
  Tensor x = test::random_tensor(gen, {kRows, kIn});
  const std::vector<double> proj = test::random_vector(gen, size_t(kRows * kOut));
  auto loss = [&] {
    Tensor y = Tensor::empty({kRows, kOut}, DType::F64);
    ops::gather_columns(x, index, y);
    return test::project(y, proj);
  };
  Tensor dx = Tensor::empty({kRows, kIn}, DType::F64);
  ops::scatter_add_columns(Tensor::from_doubles(proj, {kRows, kOut}, DType::F64), index, dx, false);
  EXPECT_LT(test::relative_error(dx.to_doubles(), test::numeric_gradient(loss, x)), 1e-9);
}

TEST(ColumnGather, BadIndicesAndShapesNameThem) {
  EXPECT_NE(error_of([] { ops::make_column_index(4, {0, 4}, Device::cpu()); })
                .find("make_column_index: index[1] = 4 is outside [0, 4)"),
            std::string::npos);
  EXPECT_NE(error_of([] { ops::make_column_index(4, {}, Device::cpu()); }).find("needs input and output columns"),
            std::string::npos);
  const ops::ColumnIndex index = ops::make_column_index(kIn, kIndex, Device::cpu());
  const Tensor x = Tensor::zeros({kRows, kIn + 1}, DType::F64);
  Tensor y = Tensor::empty({kRows, kOut}, DType::F64);
  EXPECT_NE(error_of([&] { ops::gather_columns(x, index, y); })
                .find("gather_columns: tensor 'x' has 8 columns but the index selects from 7"),
            std::string::npos);
  const Tensor x_ok = Tensor::zeros({kRows, kIn}, DType::F64);
  Tensor y_short = Tensor::empty({kRows, kOut - 1}, DType::F64);
  EXPECT_NE(error_of([&] { ops::gather_columns(x_ok, index, y_short); }).find("tensor 'y' has shape"),
            std::string::npos);
  Tensor y32 = Tensor::empty({kRows, kOut}, DType::F32);
  EXPECT_NE(error_of([&] { ops::gather_columns(x_ok, index, y32); }).find("'y' is float32 but 'x' is float64"),
            std::string::npos);
  Tensor dx = Tensor::empty({kRows + 1, kIn}, DType::F64);
  EXPECT_NE(error_of([&] { ops::scatter_add_columns(y, index, dx, false); }).find("scatter_add_columns: tensor 'dy'"),
            std::string::npos);
}

}  // namespace
}  // namespace bb
