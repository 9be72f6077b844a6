// ColumnSelect: block_columns picks a per-head part, forward is that copy,
// backward scatters (and accumulates) back to the columns it came from and
// matches float64 finite differences, and bad columns or shapes fail with
// messages naming them.
#include <gtest/gtest.h>

#include <string>

#include "bumblebee/core/error.h"
#include "bumblebee/primitive/modules/column_select.h"
#include "../../ops/finite_difference.h"

namespace bb {
namespace {

TEST(ColumnSelect, BlockColumnsPickEachGroupsPart) {
  EXPECT_EQ(block_columns(3, 5, 1, 2), (std::vector<int64_t>{1, 2, 6, 7, 11, 12}));
}

TEST(ColumnSelect, ForwardCopiesThePerHeadPart) {
  Generator gen(91);
  const Tensor x = test::random_tensor(gen, {4, 15});
  ColumnSelect sel(15, block_columns(3, 5, 1, 2));
  const std::vector<double> y = sel.forward(x).to_doubles(), xv = x.to_doubles();
  ASSERT_EQ(y.size(), size_t(4 * 6));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(y[size_t(r * 6 + h * 2 + c)], xv[size_t(r * 15 + h * 5 + 1 + c)]);
}

TEST(ColumnSelect, BackwardMatchesFiniteDifferencesAndAccumulates) {
  Generator gen(92);
  // A broadcast (every column read three times), as MLA's shared k_rope.
  ColumnSelect sel(4, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  Tensor x = test::random_tensor(gen, {5, 4});
  const std::vector<double> proj = test::random_vector(gen, 5 * 12);
  auto loss = [&] { return test::project(sel.forward(x), proj); };
  const Tensor dy = Tensor::from_doubles(proj, {5, 12}, DType::F64);
  Tensor dx;
  sel.backward(dy, dx, false);
  std::vector<double> fd = test::numeric_gradient(loss, x);
  EXPECT_LT(test::relative_error(dx.to_doubles(), fd), 1e-9);
  sel.backward(dy, dx, true);
  for (double& v : fd) v *= 2.0;
  EXPECT_LT(test::relative_error(dx.to_doubles(), fd), 1e-9);
}

TEST(ColumnSelect, BadColumnsAndShapesNameThem) {
  try {
    ColumnSelect bad(4, {0, 4});
    FAIL() << "column 4 of 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ColumnSelect: column 4 outside [0, 4)"), std::string::npos) << e.what();
  }
  ColumnSelect sel(4, {1, 2});
  try {
    sel.forward(Tensor::zeros({3, 5}, DType::F64));
    FAIL() << "a [3, 5] input accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be [N, 4]"), std::string::npos) << e.what();
  }
  Tensor dx;
  try {
    sel.backward(Tensor::zeros({3, 3}, DType::F64), dx, false);
    FAIL() << "a [3, 3] gradient accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be [N, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
