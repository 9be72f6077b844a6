// Multi-token prediction: the depth-k targets within packed sequences, and a
// float64 finite-difference check of the objective's gradients (the main
// model's hidden states and every parameter of two depths: embeddings, norms,
// eh_proj, decoder layers, heads), with the head's gradients fused into the
// forward or computed in the backward.
#include <gtest/gtest.h>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr double kTol = 1e-9;
const std::vector<int64_t> kSeqLens{4, 7, 5};
constexpr int64_t kTokens = 16, kHidden = 8, kFfn = 12, kVocab = 11, kDepths = 2, kMainLayers = 3;
constexpr double kScale = 0.3, kWeight = 0.7;

DecoderLayerConfig layer_config() {
  DecoderLayerConfig cfg;
  cfg.attention.hidden = kHidden;
  cfg.attention.num_heads = 2;
  cfg.attention.num_kv_heads = 2;
  cfg.attention.head_dim = 4;
  return cfg;
}

TEST(MultiTokenPrediction, TargetsStayWithinEachSequence) {
  // Two sequences, [10 11 12 13] and [20 21 22]; labels are the next tokens, the last of each unscored.
  const std::vector<int64_t> ids{10, 11, 12, 13, 20, 21, 22}, labels{11, 12, 13, 0, 21, 22, 0}, cu{0, 4, 7};
  const std::vector<double> mask{1, 0, 1, 0, 1, 1, 0};
  const MtpTargets d1 = mtp_targets(ids, labels, mask, cu, 1);
  EXPECT_EQ(d1.ids, (std::vector<int64_t>{11, 12, 13, 0, 21, 22, 0}));
  EXPECT_EQ(d1.labels, (std::vector<int64_t>{12, 13, 0, 0, 22, 0, 0}));
  EXPECT_EQ(d1.mask, (std::vector<double>{0, 1, 0, 0, 1, 0, 0}));
  const MtpTargets d2 = mtp_targets(ids, labels, mask, cu, 2);
  EXPECT_EQ(d2.ids, (std::vector<int64_t>{12, 13, 0, 0, 22, 0, 0}));
  EXPECT_EQ(d2.labels, (std::vector<int64_t>{13, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(d2.mask, (std::vector<double>{1, 0, 0, 0, 0, 0, 0}));
}

struct Batch {
  Tensor ids, labels, mask;
};

Batch random_batch(Generator& gen) {
  std::vector<int64_t> ids(kTokens), labels(kTokens, 0);
  std::vector<double> mask(kTokens, 0.0);
  for (int64_t& id : ids) id = int64_t(gen.next_u64() % uint64_t(kVocab));
  int64_t start = 0;
  for (int64_t len : kSeqLens) {
    for (int64_t t = start; t + 1 < start + len; ++t) {
      labels[size_t(t)] = ids[size_t(t + 1)];
      mask[size_t(t)] = gen.next_u64() % 5 == 0 ? 0.0 : 1.0;   // some scored tokens masked out
    }
    start += len;
  }
  return {Tensor::from_vector(ids, {kTokens}), Tensor::from_vector(labels, {kTokens}),
          Tensor::from_doubles(mask, {kTokens}, DType::F64)};
}

void check_gradients(bool fused) {
  test::ModuleFixture fx;
  auto mtp = fx.make_mtp(kMainLayers, kDepths, kVocab, layer_config(), kFfn, kScale);
  fx.allocate_and_init(61);
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  Generator gen(62);
  const Batch b = random_batch(gen);
  Tensor h0 = test::random_tensor(gen, {kTokens, kHidden});
  auto objective = [&] {
    MultiTokenPrediction::Saved s;
    mtp->forward(h0, b.ids, b.labels, b.mask, seq, kWeight, false, s);
    return s.objective;
  };

  MultiTokenPrediction::Saved s;
  mtp->forward(h0, b.ids, b.labels, b.mask, seq, kWeight, fused, s);
  ASSERT_EQ(s.losses.size(), size_t(kDepths));
  double sum = 0;
  for (double l : s.losses) sum += l;
  EXPECT_NEAR(s.objective, kScale / kDepths * kWeight * sum, 1e-14);
  const Tensor dh0 = mtp->backward(seq, s);
  EXPECT_LT(test::sampled_gradient_error(objective, h0, dh0.to_doubles(), gen), kTol) << "dh0";
  test::expect_parameter_gradients_match(fx, objective, gen, kTol);
}

TEST(MultiTokenPrediction, GradientsMatchFiniteDifferences) { check_gradients(false); }

TEST(MultiTokenPrediction, FusedHeadGradientsMatchFiniteDifferences) { check_gradients(true); }

TEST(MultiTokenPrediction, RejectsNegativeLossScale) {
  test::ModuleFixture fx;
  try {
    fx.make_mtp(kMainLayers, 1, kVocab, layer_config(), kFfn, -0.1);
    FAIL() << "accepted a negative mtp_loss_scaling_factor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtp_loss_scaling_factor must be >= 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
