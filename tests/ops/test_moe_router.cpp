// MoE routing on the CPU: hand-computed routings (softmax ties, sigmoid with
// an expert bias and group-limited selection, router replay), the sorted rows
// of a routing and its row-weight gathers, and moe_router_backward and the
// router z-loss against float64 finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

using ops::MoeRouterConfig;
using ops::MoeScore;

struct Routed {
  Tensor scores, experts, weights;
};

Routed route(const Tensor& logits, const MoeRouterConfig& cfg, const Tensor& bias = Tensor(),
             const Tensor& forced = Tensor()) {
  const int64_t t = logits.size(0), e = logits.size(1);
  Routed r{Tensor::empty({t, e}, logits.dtype()), Tensor::empty({t, cfg.top_k}, DType::I64),
           Tensor::empty({t, cfg.top_k}, logits.dtype())};
  ops::moe_router_forward(logits, cfg, bias, forced, r.scores, r.experts, r.weights);
  return r;
}

std::vector<int64_t> ids(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return {p, p + t.numel()};
}

MoeRouterConfig softmax(int64_t k, bool norm) {
  MoeRouterConfig c;
  c.top_k = k;
  c.norm_topk_prob = norm;
  return c;
}

// Probabilities 1/9, 2/9, 2/9, 4/9: experts 1 and 2 tie, and the lower id goes first.
Tensor tied_logits() {
  return Tensor::from_doubles({0.0, std::log(2.0), std::log(2.0), std::log(4.0)}, {1, 4}, DType::F64);
}

TEST(MoeRouter, SoftmaxTopKKeepsTheLowerExpertOnTies) {
  const Routed raw = route(tied_logits(), softmax(2, false));
  EXPECT_EQ(ids(raw.experts), (std::vector<int64_t>{3, 1}));
  const std::vector<double> w = raw.weights.to_doubles(), p = raw.scores.to_doubles();
  EXPECT_NEAR(w[0], 4.0 / 9.0, 1e-15);
  EXPECT_NEAR(w[1], 2.0 / 9.0, 1e-15);
  EXPECT_NEAR(p[0], 1.0 / 9.0, 1e-15);
  const Routed norm = route(tied_logits(), softmax(2, true));
  EXPECT_NEAR(norm.weights.to_doubles()[0], 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(norm.weights.to_doubles()[1], 1.0 / 3.0, 1e-15);
}

TEST(MoeRouter, SigmoidGroupLimitedSelectionUsesTheBiasForChoiceOnly) {
  // All scores 0.5; the bias alone decides. Groups of two, scored by the sum
  // of their two biased scores: 1.9, 2.0, 1.8, 1.2, so groups 1 and 0 are
  // kept and expert 4 (the second best overall) is out.
  MoeRouterConfig c;
  c.score = MoeScore::Sigmoid;
  c.top_k = 2;
  c.norm_topk_prob = true;
  c.num_groups = 4;
  c.topk_groups = 2;
  c.routed_scaling_factor = 2.5;
  const Tensor logits = Tensor::zeros({1, 8}, DType::F64);
  const Tensor bias = Tensor::from_doubles({0.0, 0.9, 0.5, 0.5, 0.8, 0.0, 0.1, 0.1}, {8}, DType::F64);
  const Routed r = route(logits, c, bias);
  EXPECT_EQ(ids(r.experts), (std::vector<int64_t>{1, 2}));   // 2 before 3: a tie
  for (double w : r.weights.to_doubles()) EXPECT_NEAR(w, 2.5 * 0.5, 1e-15);
  for (double s : r.scores.to_doubles()) EXPECT_EQ(s, 0.5);
  c.num_groups = 0;
  EXPECT_EQ(ids(route(logits, c, bias).experts), (std::vector<int64_t>{1, 4}));
}

TEST(MoeRouter, ForcedExpertsTakeTheirWeightsFromTheLiveScores) {
  const Tensor forced = Tensor::from_vector<int64_t>({0, 3}, {1, 2});
  const Routed r = route(tied_logits(), softmax(2, true), Tensor(), forced);
  EXPECT_EQ(ids(r.experts), (std::vector<int64_t>{0, 3}));
  EXPECT_NEAR(r.weights.to_doubles()[0], 1.0 / 5.0, 1e-15);
  EXPECT_NEAR(r.weights.to_doubles()[1], 4.0 / 5.0, 1e-15);
  const Tensor bad = Tensor::from_vector<int64_t>({0, 4}, {1, 2});
  try {
    route(tied_logits(), softmax(2, true), Tensor(), bad);
    FAIL() << "an expert id outside [0, E) was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("token 0 slot 1 is 4"), std::string::npos) << e.what();
  }
}

TEST(MoeRouter, RejectsGroupsThatCannotHoldTopK) {
  MoeRouterConfig c = softmax(5, false);
  c.num_groups = 4;
  c.topk_groups = 2;   // 2 groups of 2 experts < 5
  EXPECT_THROW(route(Tensor::zeros({1, 8}, DType::F64), c), std::exception);
}

TEST(MoeSortRows, RowsBySlotThenTokenWithinAnExpert) {
  const Tensor experts = Tensor::from_vector<int64_t>({1, 0, 0, 1, 1, 2}, {3, 2});
  Tensor tok = Tensor::empty({6}, DType::I64), slot = Tensor::empty({6}, DType::I64);
  Tensor counts = Tensor::empty({4}, DType::I64);
  ops::moe_sort_rows(experts, 4, tok, slot, counts);
  EXPECT_EQ(ids(tok), (std::vector<int64_t>{1, 0, 0, 2, 1, 2}));
  EXPECT_EQ(ids(slot), (std::vector<int64_t>{0, 1, 0, 0, 1, 1}));
  EXPECT_EQ(ids(counts), (std::vector<int64_t>{2, 3, 1, 0}));   // expert 3 gets no rows

  const Tensor w = Tensor::from_doubles({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {3, 2}, DType::F64);
  Tensor rw = Tensor::empty({6}, DType::F64);
  ops::moe_row_weights(w, tok, slot, rw);
  EXPECT_EQ(rw.to_doubles(), (std::vector<double>{0.3, 0.2, 0.1, 0.5, 0.4, 0.6}));
  Tensor back = Tensor::empty({3, 2}, DType::F64);
  ops::moe_gather_row_grads(rw, tok, slot, back);
  EXPECT_EQ(back.to_doubles(), w.to_doubles());

  const Tensor bad = Tensor::from_vector<int64_t>({1, 0, 0, 7, 1, 2}, {3, 2});
  EXPECT_THROW(ops::moe_sort_rows(bad, 4, tok, slot, counts), std::exception);
}

TEST(MoeRowsByToken, EachTokensRowsAscending) {
  // The rows of MoeSortRows' routing: tokens 1 0 0 2 1 2, slots 0 1 0 0 1 1.
  const Tensor tok = Tensor::from_vector<int64_t>({1, 0, 0, 2, 1, 2}, {6});
  const Tensor slot = Tensor::from_vector<int64_t>({0, 1, 0, 0, 1, 1}, {6});
  Tensor index = Tensor::empty({3, 2}, DType::I64);
  ops::moe_rows_by_token(tok, slot, index);
  EXPECT_EQ(ids(index), (std::vector<int64_t>{1, 2, 0, 4, 3, 5}));
}

TEST(MoeRowsByToken, RejectsAPairWithTwoRows) {
  const Tensor tok = Tensor::from_vector<int64_t>({1, 0, 0, 2, 1, 2}, {6});
  const Tensor slot = Tensor::from_vector<int64_t>({0, 1, 1, 0, 1, 1}, {6});   // token 0 slot 1 twice
  Tensor index = Tensor::empty({3, 2}, DType::I64);
  try {
    ops::moe_rows_by_token(tok, slot, index);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows 1 and 2 both name token 0 slot 1"), std::string::npos) << e.what();
  }
  Tensor wrong_shape = Tensor::empty({2, 2}, DType::I64);
  EXPECT_THROW(ops::moe_rows_by_token(tok, slot, wrong_shape), std::exception);
}

TEST(MoeScoreSums, SumsEachExpertOverTokens) {
  const Tensor s = Tensor::from_doubles({0.1, 0.9, 0.3, 0.7, 0.5, 0.5}, {3, 2}, DType::F64);
  Tensor sums = Tensor::empty({2}, DType::F64);
  ops::moe_score_sums(s, sums);
  EXPECT_NEAR(sums.to_doubles()[0], 0.9, 1e-15);
  EXPECT_NEAR(sums.to_doubles()[1], 2.1, 1e-15);
}

// z = scale x sum_t lse_t^2: lse by hand, dlogits (added to what was there) by finite differences.
TEST(MoeRouterZLoss, LogSumExpAndGradientMatchFiniteDifferences) {
  constexpr int64_t kT = 4, kE = 6;
  constexpr double kScale = 0.37;
  Generator gen(917);
  Tensor logits = test::random_tensor(gen, {kT, kE}, DType::F64, 3.0);
  auto lse_of = [&] {
    Tensor lse = Tensor::empty({kT}, DType::F64);
    ops::moe_router_lse(logits, lse);
    return lse.to_doubles();
  };
  const std::vector<double> z = logits.to_doubles(), lse = lse_of();
  for (int64_t t = 0; t < kT; ++t) {
    double s = 0;
    for (int64_t e = 0; e < kE; ++e) s += std::exp(z[size_t(t * kE + e)]);
    EXPECT_NEAR(lse[size_t(t)], std::log(s), 1e-12);
  }
  auto loss = [&] {
    double s = 0;
    for (double l : lse_of()) s += kScale * l * l;
    return s;
  };
  const std::vector<double> numeric = test::numeric_gradient(loss, logits);
  const std::vector<double> start = test::random_vector(gen, size_t(kT * kE));
  Tensor dlogits = Tensor::from_doubles(start, {kT, kE}, DType::F64);
  Tensor l = Tensor::from_doubles(lse, {kT}, DType::F64);
  ops::moe_router_z_loss_backward(logits, l, kScale, dlogits);
  std::vector<double> added = dlogits.to_doubles();
  for (size_t i = 0; i < added.size(); ++i) added[i] -= start[i];
  EXPECT_LT(test::relative_error(added, numeric), 1e-8);
}

struct BackwardCase {
  const char* name;
  MoeRouterConfig cfg;
  bool bias, per_token_extra;
};

class MoeRouterBackward : public ::testing::TestWithParam<BackwardCase> {};

// loss = sum a . weights + sum b . scores, as functions of the logits with the
// selection held (random logits: no choice flips within the step).
TEST_P(MoeRouterBackward, MatchesFiniteDifferences) {
  const BackwardCase& c = GetParam();
  constexpr int64_t kT = 5, kE = 8;
  Generator gen(913);
  Tensor logits = test::random_tensor(gen, {kT, kE});
  const Tensor bias = c.bias ? test::random_tensor(gen, {kE}, DType::F64, 0.3) : Tensor();
  const Routed r = route(logits, c.cfg, bias);
  const std::vector<double> a = test::random_vector(gen, size_t(kT * c.cfg.top_k));
  const Shape extra_shape = c.per_token_extra ? Shape{kT, kE} : Shape{kE};
  const std::vector<double> b = test::random_vector(gen, size_t(shape_numel(extra_shape)));
  const Tensor forced = r.experts;   // replay keeps the selection fixed under the perturbation
  auto loss = [&] {
    const Routed p = route(logits, c.cfg, bias, forced);
    std::vector<double> bb = b;
    if (!c.per_token_extra) {
      bb.clear();
      for (int64_t t = 0; t < kT; ++t) bb.insert(bb.end(), b.begin(), b.end());
    }
    return test::project(p.weights, a) + test::project(p.scores, bb);
  };
  const std::vector<double> numeric = test::numeric_gradient(loss, logits);
  Tensor dlogits = Tensor::empty({kT, kE}, DType::F64);
  ops::moe_router_backward(Tensor::from_doubles(a, {kT, c.cfg.top_k}, DType::F64),
                           Tensor::from_doubles(b, extra_shape, DType::F64), logits, r.scores, r.experts, r.weights,
                           c.cfg, dlogits);
  EXPECT_LT(test::relative_error(dlogits.to_doubles(), numeric), 1e-8);
}

MoeRouterConfig sigmoid_grouped() {
  MoeRouterConfig c;
  c.score = MoeScore::Sigmoid;
  c.top_k = 3;
  c.norm_topk_prob = true;
  c.num_groups = 4;
  c.topk_groups = 2;
  c.routed_scaling_factor = 2.5;
  return c;
}

MoeRouterConfig sigmoid_raw() {
  MoeRouterConfig c = sigmoid_grouped();
  c.norm_topk_prob = false;
  return c;
}

INSTANTIATE_TEST_SUITE_P(Routers, MoeRouterBackward,
                         ::testing::Values(BackwardCase{"SoftmaxRaw", softmax(3, false), false, true},
                                           BackwardCase{"SoftmaxRenormalised", softmax(3, true), false, false},
                                           BackwardCase{"SigmoidGroupedScaled", sigmoid_grouped(), true, true},
                                           BackwardCase{"SigmoidRawScaled", sigmoid_raw(), true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace bb
