// MoE token permutation on the CPU: permute then unpermute with routing
// weights that sum to 1 per token restores the input, both backwards match
// float64 finite differences, and the token sums through moe_rows_by_token's
// index equal their own gather.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 5, kHidden = 3, kTopK = 2;

// Rows sorted by expert, as a router would emit them: token t's two rows are
// scattered over the row range; every token appears kTopK times.
Tensor token_of_row() {
  return Tensor::from_vector<int64_t>({3, 0, 4, 1, 2, 0, 3, 2, 4, 1}, {kTokens * kTopK});
}

TEST(MoePermute, UnpermuteOfPermuteRestoresTheInput) {
  Generator gen(71);
  const Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const Tensor rows = token_of_row();
  // Weights w and 1 - w for each token's two rows.
  std::vector<double> w(size_t(kTokens * kTopK));
  std::vector<int> seen(size_t(kTokens), 0);
  const std::vector<int64_t> tok = {3, 0, 4, 1, 2, 0, 3, 2, 4, 1};
  for (size_t i = 0; i < tok.size(); ++i) w[i] = seen[size_t(tok[i])]++ == 0 ? 0.3 + 0.1 * double(tok[i]) : 0.0;
  for (size_t i = 0; i < tok.size(); ++i)
    if (w[i] == 0.0) w[i] = 1.0 - (0.3 + 0.1 * double(tok[i]));
  Tensor perm = Tensor::empty({kTokens * kTopK, kHidden}, DType::F64);
  ops::moe_permute(x, rows, perm);
  Tensor back = Tensor::empty({kTokens, kHidden}, DType::F64);
  ops::moe_unpermute(perm, rows, Tensor::from_doubles(w, {kTokens * kTopK}, DType::F64), back);
  EXPECT_LT(test::relative_error(back.to_doubles(), x.to_doubles()), 1e-15);
}

TEST(MoePermute, PermuteBackwardMatchesFiniteDifferences) {
  Generator gen(72);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const Tensor rows = token_of_row();
  const std::vector<double> proj = test::random_vector(gen, size_t(kTokens * kTopK * kHidden));
  auto loss = [&] {
    Tensor out = Tensor::empty({kTokens * kTopK, kHidden}, DType::F64);
    ops::moe_permute(x, rows, out);
    return test::project(out, proj);
  };
  Tensor dx = Tensor::empty({kTokens, kHidden}, DType::F64);
  ops::moe_permute_backward(Tensor::from_doubles(proj, {kTokens * kTopK, kHidden}, DType::F64), rows, dx);
  EXPECT_LT(test::relative_error(dx.to_doubles(), test::numeric_gradient(loss, x)), 1e-9);
}

TEST(MoePermute, UnpermuteBackwardMatchesFiniteDifferences) {
  Generator gen(73);
  Tensor y = test::random_tensor(gen, {kTokens * kTopK, kHidden});
  Tensor probs = test::random_tensor(gen, {kTokens * kTopK});
  const Tensor rows = token_of_row();
  const std::vector<double> proj = test::random_vector(gen, size_t(kTokens * kHidden));
  auto loss = [&] {
    Tensor out = Tensor::empty({kTokens, kHidden}, DType::F64);
    ops::moe_unpermute(y, rows, probs, out);
    return test::project(out, proj);
  };
  Tensor dy = Tensor::empty(y.shape(), DType::F64), dprobs = Tensor::empty(probs.shape(), DType::F64);
  ops::moe_unpermute_backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), y, rows, probs, dy, dprobs);
  EXPECT_LT(test::relative_error(dy.to_doubles(), test::numeric_gradient(loss, y)), 1e-9) << "dy";
  EXPECT_LT(test::relative_error(dprobs.to_doubles(), test::numeric_gradient(loss, probs)), 1e-9) << "dprobs";
}

// The index of each token's rows (built here from token_of_row(): every
// token's two rows, ascending) gives the token sums the same bits as their
// own gather, and an index that names another token's row is refused.
Tensor rows_by_token() {
  const std::vector<int64_t> tok = {3, 0, 4, 1, 2, 0, 3, 2, 4, 1};
  std::vector<int64_t> index;
  for (int64_t t = 0; t < kTokens; ++t)
    for (size_t i = 0; i < tok.size(); ++i)
      if (tok[i] == t) index.push_back(int64_t(i));
  return Tensor::from_vector<int64_t>(index, {kTokens, kTopK});
}

TEST(MoePermute, TokenSumsThroughTheIndexEqualTheirOwnGather) {
  Generator gen(74);
  const Tensor y = test::random_tensor(gen, {kTokens * kTopK, kHidden});
  const Tensor probs = test::random_tensor(gen, {kTokens * kTopK});
  const Tensor rows = token_of_row(), index = rows_by_token();
  Tensor a = Tensor::empty({kTokens, kHidden}, DType::F64), b = Tensor::empty({kTokens, kHidden}, DType::F64);
  ops::moe_unpermute(y, rows, probs, a);
  ops::moe_unpermute(y, rows, probs, b, index);
  EXPECT_EQ(a.to_doubles(), b.to_doubles());
  ops::moe_permute_backward(y, rows, a);
  ops::moe_permute_backward(y, rows, b, index);
  EXPECT_EQ(a.to_doubles(), b.to_doubles());
}

TEST(MoePermute, RejectsAnIndexThatDisagreesWithTheRows) {
  const Tensor y = Tensor::zeros({kTokens * kTopK, kHidden}, DType::F64);
  Tensor out = Tensor::empty({kTokens, kHidden}, DType::F64);
  std::vector<int64_t> index = {1, 5, 3, 9, 4, 7, 0, 6, 2, 8};
  std::swap(index[0], index[2]);   // token 0 given row 3, token 3's
  try {
    ops::moe_permute_backward(y, token_of_row(), out, Tensor::from_vector<int64_t>(index, {kTokens, kTopK}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows_by_token[0, 0] = 3 is not a row of token 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ops::moe_permute_backward(y, token_of_row(), out, Tensor::from_vector<int64_t>(index, {2, 5})),
               std::exception);
}

TEST(MoePermute, RejectsRowsOutsideTheTokens) {
  const Tensor x = Tensor::zeros({2, kHidden}, DType::F64);
  Tensor out = Tensor::empty({2, kHidden}, DType::F64);
  try {
    ops::moe_permute(x, Tensor::from_vector<int64_t>({0, 2}, {2}), out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token_of_row[1] = 2 is outside [0, 2)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
