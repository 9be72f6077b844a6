// Float64 checks of the LM head with fused cross entropy on one rank: the
// per-token loss against a naive log-softmax of h W^T / temperature, and dh,
// dW of the masked loss sum_t dloss_t loss_t against finite differences, for
// temperature 1 and not. Masked tokens (dloss 0, any label: -100 or a real
// id) get no gradient; the fused path (dloss known at forward) and the
// recompute path (dloss given to backward) agree bit for bit. Chunks of any
// size give the same loss and gradients up to rounding, and the automatic
// chunk size splits tokens evenly under its logits budget.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 9, kHidden = 6, kVocab = 11;
constexpr double kTol = 1e-9;

// Tokens 2 and 6 are masked; one with the ignore index, one with a valid id.
const std::vector<int64_t> kLabels{3, 0, -100, 10, 7, 5, 4, 1, 9};
const std::vector<bool> kMasked{false, false, true, false, false, false, true, false, false};

Tensor labels() { return Tensor::from_vector(kLabels, {kTokens}); }

// The built-in loss: the loss mask over the count of unmasked tokens.
Tensor mean_over_unmasked() {
  std::vector<double> d(static_cast<size_t>(kTokens));
  double count = 0;
  for (bool m : kMasked) count += m ? 0 : 1;
  for (int64_t t = 0; t < kTokens; ++t) d[size_t(t)] = kMasked[size_t(t)] ? 0.0 : 1.0 / count;
  return Tensor::from_doubles(d, {kTokens}, DType::F64);
}

class LMHeadTemperature : public ::testing::TestWithParam<double> {};

TEST_P(LMHeadTemperature, LossMatchesNaiveLogSoftmax) {
  const double temperature = GetParam();
  test::ModuleFixture fx;
  auto head = fx.make_lm_head(kVocab, kHidden, temperature);
  fx.allocate_and_init(61);
  Generator gen(62);
  Tensor h = test::random_tensor(gen, {kTokens, kHidden});
  LMHead::Saved s;
  const std::vector<double> loss = head->forward(h, labels(), Tensor(), s).to_doubles();
  const std::vector<double> vh = h.to_doubles(), vw = fx.param("lm_head.weight").value.to_doubles();
  for (int64_t t = 0; t < kTokens; ++t) {
    if (kMasked[size_t(t)]) continue;
    std::vector<double> z(size_t(kVocab), 0.0);
    double zmax = -INFINITY, sum = 0.0;
    for (int64_t v = 0; v < kVocab; ++v) {
      for (int64_t i = 0; i < kHidden; ++i) z[size_t(v)] += vh[size_t(t * kHidden + i)] * vw[size_t(v * kHidden + i)];
      z[size_t(v)] /= temperature;
      zmax = std::max(zmax, z[size_t(v)]);
    }
    for (double zv : z) sum += std::exp(zv - zmax);
    const double expect = zmax + std::log(sum) - z[size_t(kLabels[size_t(t)])];
    EXPECT_NEAR(loss[size_t(t)], expect, 1e-14 * std::abs(expect)) << "token " << t;
  }
}

TEST_P(LMHeadTemperature, GradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  auto head = fx.make_lm_head(kVocab, kHidden, GetParam());
  fx.allocate_and_init(63);
  Generator gen(64);
  Tensor h = test::random_tensor(gen, {kTokens, kHidden});
  const Tensor dloss = mean_over_unmasked();
  auto loss = [&] {
    LMHead::Saved s;
    return test::project(head->forward(h, labels(), Tensor(), s), dloss.to_doubles());
  };

  LMHead::Saved s;
  head->forward(h, labels(), dloss, s);
  const std::vector<double> dh = head->backward(dloss, s).to_doubles();
  EXPECT_LT(test::sampled_gradient_error(loss, h, dh, gen, kTokens * kHidden), kTol) << "dh";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t i = 0; i < kHidden; ++i)
      if (kMasked[size_t(t)]) EXPECT_EQ(dh[size_t(t * kHidden + i)], 0.0) << "masked token " << t;
}

TEST_P(LMHeadTemperature, RecomputePathMatchesFusedPath) {
  Generator gen(65);
  Tensor h = test::random_tensor(gen, {kTokens, kHidden});
  const Tensor dloss = mean_over_unmasked();
  std::vector<double> loss[2], dh[2], dw[2];
  for (int fused = 0; fused < 2; ++fused) {
    test::ModuleFixture fx;
    auto head = fx.make_lm_head(kVocab, kHidden, GetParam());
    fx.allocate_and_init(66);
    LMHead::Saved s;
    loss[fused] = head->forward(h, labels(), fused ? dloss : Tensor(), s).to_doubles();
    EXPECT_EQ(s.h_full.defined(), fused == 0) << "only the recompute path keeps h";
    dh[fused] = head->backward(dloss, s).to_doubles();
    dw[fused] = fx.param("lm_head.weight").grad.to_doubles();
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(dh[0], dh[1]);
  EXPECT_EQ(dw[0], dw[1]);
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << what << " [" << i << "]";
}

// Chunks of 1, 4 (uneven: 4 + 4 + 1) and all 9 tokens, on both paths.
TEST_P(LMHeadTemperature, ChunkSizeChangesNothingButRounding) {
  Generator gen(67);
  Tensor h = test::random_tensor(gen, {kTokens, kHidden});
  const Tensor dloss = mean_over_unmasked();
  for (int fused = 0; fused < 2; ++fused) {
    std::vector<double> loss[3], dh[3], dw[3];
    const int64_t chunks[3] = {kTokens, 1, 4};
    for (int c = 0; c < 3; ++c) {
      test::ModuleFixture fx;
      auto head = fx.make_lm_head(kVocab, kHidden, GetParam(), "lm_head.weight", chunks[c]);
      fx.allocate_and_init(68);
      LMHead::Saved s;
      loss[c] = head->forward(h, labels(), fused ? dloss : Tensor(), s).to_doubles();
      dh[c] = head->backward(dloss, s).to_doubles();
      dw[c] = fx.param("lm_head.weight").grad.to_doubles();
    }
    for (int c = 1; c < 3; ++c) {
      const std::string what = "chunk_tokens " + std::to_string(chunks[c]) + (fused ? " fused" : " recompute");
      expect_close(loss[c], loss[0], what + " loss");
      expect_close(dh[c], dh[0], what + " dh");
      expect_close(dw[c], dw[0], what + " dW");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OneAndNot, LMHeadTemperature, ::testing::Values(1.0, 0.7));

TEST(LMHeadChunks, AutoSplitsEvenlyUnderTheLogitsBudget) {
  test::ModuleFixture fx;
  auto head = fx.make_lm_head(kVocab, kHidden, 1.0);
  // Qwen3's vocabulary: 8192 tokens are 1.24G logits, two chunks of 4096.
  EXPECT_EQ(head->chunk_rows(8192, 151936), 4096);
  EXPECT_EQ(head->chunk_rows(4096, 151936), 4096);
  // 2^30 / 151936 = 7067 rows at most: 7068 tokens are two chunks of 3534.
  EXPECT_EQ(head->chunk_rows(7068, 151936), 3534);
  EXPECT_EQ(head->chunk_rows(kTokens, kVocab), kTokens);
  EXPECT_EQ(head->chunk_rows(0, kVocab), 1);
  auto fixed = fx.make_lm_head(kVocab, kHidden, 1.0, "other.weight", 5);
  EXPECT_EQ(fixed->chunk_rows(kTokens, kVocab), 5);
  EXPECT_EQ(fixed->chunk_rows(3, kVocab), 3);
}

}  // namespace
}  // namespace bb
