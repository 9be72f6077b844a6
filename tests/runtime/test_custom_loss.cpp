// A custom loss_fn over per-token log-probs: written to equal the built-in
// mean cross entropy, it must give the same loss and gradients (this runs the
// LM head's recompute path instead of the fused one).
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"
#include "tests/runtime/model_grads.h"

namespace bb {
namespace {

TEST(CustomLoss, MeanCrossEntropyThroughLogProbsMatchesBuiltIn) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("qwen3_tp");
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_tp");
  auto train = rt->train_mode(h);

  rt->zero_grad(h);
  const ForwardResult builtin = rt->forward_backward(h, batch, {}, 2);
  const std::vector<double> builtin_grads = test::all_grads(h);

  // Scored positions of the whole batch: every position but each sequence's last.
  const double scored = double(batch.total_tokens() - batch.num_seqs());
  LossFn mean_ce = [&](const ModelOutputs& out, const PackedBatch& mb) {
    LossOutput lo;
    lo.grad_log_probs.assign(out.log_probs.size(), 0.0);
    int64_t t = 0;
    for (int64_t len : mb.seq_lens) {
      for (int64_t i = 0; i + 1 < len; ++i) {
        lo.loss -= out.log_probs[size_t(t + i)] / scored;
        lo.grad_log_probs[size_t(t + i)] = -1.0 / scored;
      }
      t += len;
    }
    return lo;
  };
  rt->zero_grad(h);
  const ForwardResult custom = rt->forward_backward(h, batch, mean_ce, 2);
  const std::vector<double> custom_grads = test::all_grads(h);

  double mb_sum = 0;
  for (double l : custom.metrics.at("loss")) mb_sum += l;
  EXPECT_NEAR(mb_sum, builtin.loss, 1e-12 * builtin.loss);
  ASSERT_EQ(custom_grads.size(), builtin_grads.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < custom_grads.size(); ++i) {
    err = std::max(err, std::abs(custom_grads[i] - builtin_grads[i]));
    norm = std::max(norm, std::abs(builtin_grads[i]));
  }
  EXPECT_LT(err / norm, 1e-12);
  // Log-probs are reported for scored positions only; each sequence's last position holds 0.
  EXPECT_EQ(custom.model_output[0].log_probs.back(), 0.0);
  EXPECT_LT(custom.model_output[0].log_probs.front(), 0.0);
}

}  // namespace
}  // namespace bb
