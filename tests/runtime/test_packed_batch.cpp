// PackedBatch end to end on one rank: a packed batch of 1..7 sequences of
// random lengths (odd lengths, a length-1 sequence, loss_mask with zeros)
// gives, through create_runtime / forward_backward, the per-sequence losses
// and the summed gradients of running each sequence alone, in float64 on the
// CPU, for any number of microbatches, on a dense and an MoE model (its
// load-balancing loss off: HF's is over the whole batch, not per sequence).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"
#include "tests/runtime/model_grads.h"

namespace bb {
namespace {

// The summed masked cross entropy: position t of a sequence predicts token
// t + 1 and counts with loss_mask[t + 1] (the built-in loss's weighting,
// without its normalisation, so per-sequence gradients add up).
LossOutput summed_cross_entropy(const ModelOutputs& out, const PackedBatch& mb) {
  LossOutput lo;
  lo.grad_log_probs.assign(out.log_probs.size(), 0.0);
  int64_t first = 0;
  for (int64_t len : mb.seq_lens) {
    for (int64_t i = 0; i + 1 < len; ++i) {
      const size_t t = size_t(first + i);
      const double m = mb.loss_mask.empty() ? 1.0 : mb.loss_mask[t + 1];
      lo.loss -= m * out.log_probs[t];
      lo.grad_log_probs[t] = -m;
    }
    first += len;
  }
  return lo;
}

PackedBatch random_batch(std::mt19937_64& gen, int num_seqs, int64_t vocab) {
  std::uniform_int_distribution<int64_t> len_of(2, 13), token(0, vocab - 1);
  std::bernoulli_distribution masked(0.25);
  PackedBatch b;
  for (int s = 0; s < num_seqs; ++s) {
    // One sequence of length 1 (it predicts nothing) and mostly odd lengths.
    int64_t len = s == 1 ? 1 : len_of(gen);
    if (len % 2 == 0 && s % 3 != 2) ++len;
    b.seq_lens.push_back(len);
    for (int64_t i = 0; i < len; ++i) {
      b.input_ids.push_back(token(gen));
      b.loss_mask.push_back(masked(gen) ? 0.0f : 1.0f);
    }
  }
  return b;
}

struct Step {
  double loss = 0;
  std::vector<double> token_loss;   // [T] over all microbatches, in batch order
  std::vector<double> grads;
};

class PackedBatchEndToEnd : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    RuntimeConfig cfg;
    cfg.backend = "bb";
    cfg.hf_path = test::fixture_dir(GetParam());
    cfg.backend_cfg.dtype = "float64";
    if (GetParam().find("moe") != std::string::npos) cfg.backend_cfg.router_aux_loss_coef = 0.0;
    rt_ = create_runtime(cfg);
    h_ = rt_->build_model();
    vocab_ = h_.model().vocab_size();
  }

  Step run(const PackedBatch& b, const LossFn& loss_fn, int microbatches) {
    auto train = rt_->train_mode(h_);
    rt_->zero_grad(h_);
    const ForwardResult r = rt_->forward_backward(h_, b, loss_fn, microbatches);
    Step s;
    s.loss = r.loss;
    for (const ModelOutputs& mo : r.model_output) s.token_loss.insert(s.token_loss.end(), mo.token_loss.begin(),
                                                                       mo.token_loss.end());
    s.grads = test::all_grads(h_);
    return s;
  }

  std::unique_ptr<Runtime> rt_;
  ModelHandle h_;
  int64_t vocab_ = 0;
};

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double loss_tokens(const PackedBatch& b, int64_t first, int64_t len) {
  double n = 0;
  for (int64_t i = 1; i < len; ++i) n += b.loss_mask[size_t(first + i)];
  return n;
}

TEST_P(PackedBatchEndToEnd, SummedLossGivesPerSequenceLossesAndSummedGradients) {
  std::mt19937_64 gen(20261201);
  for (int num_seqs = 1; num_seqs <= 7; ++num_seqs) {
    const PackedBatch batch = random_batch(gen, num_seqs, vocab_);
    std::vector<double> seq_loss, sum_grads;
    for (int s = 0; s < num_seqs; ++s) {
      const Step alone = run(batch.slice_sequences(s, 1), summed_cross_entropy, 1);
      double l = 0;
      for (double x : alone.token_loss) l += x;
      seq_loss.push_back(l);
      if (sum_grads.empty()) sum_grads.assign(alone.grads.size(), 0.0);
      for (size_t i = 0; i < sum_grads.size(); ++i) sum_grads[i] += alone.grads[i];
    }
    const double grad_scale = max_abs(sum_grads);
    for (int mbs : {1, 2, 3, num_seqs}) {
      if (mbs > num_seqs) continue;
      const std::string where = GetParam() + ": " + std::to_string(num_seqs) + " sequences, " +
                                std::to_string(mbs) + " microbatches";
      const Step packed = run(batch, summed_cross_entropy, mbs);
      ASSERT_EQ(packed.token_loss.size(), batch.input_ids.size()) << where;
      int64_t first = 0;
      for (int s = 0; s < num_seqs; ++s) {
        double l = 0;
        for (int64_t i = 0; i < batch.seq_lens[size_t(s)]; ++i) l += packed.token_loss[size_t(first + i)];
        EXPECT_NEAR(l, seq_loss[size_t(s)], 1e-12 * (1.0 + std::abs(seq_loss[size_t(s)]))) << where << " seq " << s;
        first += batch.seq_lens[size_t(s)];
      }
      ASSERT_EQ(packed.grads.size(), sum_grads.size()) << where;
      double err = 0;
      for (size_t i = 0; i < sum_grads.size(); ++i) err = std::max(err, std::abs(packed.grads[i] - sum_grads[i]));
      EXPECT_LT(err, 1e-12 * grad_scale) << where;
    }
  }
}

// The built-in loss (the mean over the batch's loss tokens): the packed
// batch's loss and gradients are the alone runs' weighted by their loss tokens.
TEST_P(PackedBatchEndToEnd, BuiltInLossIsTheTokenWeightedMeanOfTheSequences) {
  std::mt19937_64 gen(7);
  for (int num_seqs : {1, 4, 7}) {
    const PackedBatch batch = random_batch(gen, num_seqs, vocab_);
    double tokens = 0, loss_sum = 0;
    std::vector<double> weighted;
    int64_t first = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const int64_t len = batch.seq_lens[size_t(s)];
      const double n = loss_tokens(batch, first, len);
      first += len;
      const Step alone = run(batch.slice_sequences(s, 1), {}, 1);
      tokens += n;
      loss_sum += n * alone.loss;
      if (weighted.empty()) weighted.assign(alone.grads.size(), 0.0);
      for (size_t i = 0; i < weighted.size(); ++i) weighted[i] += n * alone.grads[i];
    }
    ASSERT_GT(tokens, 0) << num_seqs;
    for (double& g : weighted) g /= tokens;
    for (int mbs : {1, std::min(3, num_seqs)}) {
      const std::string where = GetParam() + ": " + std::to_string(num_seqs) + " sequences, " +
                                std::to_string(mbs) + " microbatches";
      const Step packed = run(batch, {}, mbs);
      EXPECT_NEAR(packed.loss, loss_sum / tokens, 1e-12 * (loss_sum / tokens)) << where;
      double err = 0;
      for (size_t i = 0; i < weighted.size(); ++i) err = std::max(err, std::abs(packed.grads[i] - weighted[i]));
      EXPECT_LT(err, 1e-12 * max_abs(weighted)) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackedBatchEndToEnd, ::testing::Values("qwen3_gqa", "qwen3_moe_mixed"));

}  // namespace
}  // namespace bb
