// The runtime's per-token outputs under cp (x dp = world / cp) in float64:
// a forward-only call's log-probs and token losses, a custom loss_fn's
// outputs, loss and gradients, and Runtime::logits (also under pp 2, alone
// and with cp) equal the run without them (dp = world, every rank the same
// batch, which is the single-rank run) to 1e-12, in the batch's token order
// with the zigzag split's padding dropped.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/mpi/mpi_test_support.h"

namespace bb {
namespace {

// Odd lengths, so every sequence is padded for the zigzag split.
PackedBatch odd_sequences() {
  PackedBatch b;
  b.seq_lens = {5, 9, 3, 7};
  for (int i = 0; i < 24; ++i) b.input_ids.push_back((i * 37 + 5) % 131);
  return b;
}

// The per-microbatch mean cross entropy, as a custom loss.
LossOutput mean_ce(const ModelOutputs& out, const PackedBatch&) {
  LossOutput lo;
  double n = 0;
  for (double tl : out.token_loss) n += tl != 0.0;
  for (double tl : out.token_loss) lo.loss += tl / n;
  lo.grad_log_probs.assign(out.log_probs.size(), 0.0);
  for (size_t t = 0; t < out.token_loss.size(); ++t)
    if (out.token_loss[t] != 0.0) lo.grad_log_probs[t] = -1.0 / n;
  return lo;
}

struct Outputs {
  ForwardResult eval, custom;
  std::vector<double> logits;
  double grad_norm_per_replica = 0;   // the dp reduction sums the replicas' identical gradients
};

Outputs run(int cp, int pp = 1) {
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa";
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.parallel.cp = cp;
  cfg.backend_cfg.parallel.pp = pp;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const PackedBatch batch = odd_sequences();
  Outputs o;
  {
    auto mode = rt->eval_mode(h);
    o.eval = rt->forward_backward(h, batch, {}, 2, true);
    o.logits = rt->logits(h, batch).to_doubles();
  }
  auto mode = rt->train_mode(h);
  rt->zero_grad(h);
  o.custom = rt->forward_backward(h, batch, mean_ce, 2);
  o.grad_norm_per_replica = rt->optimizer_step(h).grad_norm / rt->parallel_state().dp_size();
  return o;
}

void expect_same_logits(const std::vector<double>& a, const std::vector<double>& b, const std::string& tag) {
  ASSERT_EQ(a.size(), b.size()) << tag;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * (1 + std::abs(b[i]))) << tag << " logit " << i;
}

void expect_same_outputs(const ForwardResult& a, const ForwardResult& b, const std::string& tag) {
  EXPECT_NEAR(a.loss, b.loss, 1e-12 * std::abs(b.loss)) << tag;
  ASSERT_EQ(a.model_output.size(), b.model_output.size()) << tag;
  for (size_t m = 0; m < b.model_output.size(); ++m) {
    const ModelOutputs &x = a.model_output[m], &y = b.model_output[m];
    ASSERT_EQ(x.log_probs.size(), y.log_probs.size()) << tag << " microbatch " << m;
    ASSERT_EQ(x.token_loss.size(), y.token_loss.size()) << tag << " microbatch " << m;
    for (size_t t = 0; t < y.log_probs.size(); ++t) {
      EXPECT_NEAR(x.log_probs[t], y.log_probs[t], 1e-12 * (1 + std::abs(y.log_probs[t]))) << tag << " token " << t;
      EXPECT_NEAR(x.token_loss[t], y.token_loss[t], 1e-12 * (1 + std::abs(y.token_loss[t]))) << tag << " token " << t;
    }
    EXPECT_NEAR(x.loss, y.loss, 1e-12 * std::abs(y.loss)) << tag << " microbatch " << m;
  }
}

TEST(ContextParallelRuntime, PerTokenOutputsMatchOneRank) {
  const Outputs single = run(1);
  EXPECT_EQ(single.eval.model_output[0].log_probs.size(), 14u);   // sequences 5 + 9
  EXPECT_EQ(single.logits.size() % 24, 0u);                          // [T, V], T = 24
  for (int cp : {2, 4}) {
    if (test::world_comm().size() % cp != 0) continue;
    const std::string tag = "cp " + std::to_string(cp);
    const Outputs par = run(cp);
    expect_same_logits(par.logits, single.logits, tag);
    expect_same_outputs(par.eval, single.eval, tag + " forward only");
    expect_same_outputs(par.custom, single.custom, tag + " custom loss");
    EXPECT_NEAR(par.grad_norm_per_replica, single.grad_norm_per_replica, 1e-12 * single.grad_norm_per_replica) << tag;
  }
}

// Runtime::logits from the last pipeline stage reach every stage, alone and with cp.
TEST(ContextParallelRuntime, PipelineLogitsMatchOneRank) {
  const Outputs single = run(1);
  for (int cp : {1, 2}) {
    if (test::world_comm().size() % (2 * cp) != 0) continue;
    expect_same_logits(run(cp, 2).logits, single.logits, "pp 2 cp " + std::to_string(cp));
  }
}

}  // namespace
}  // namespace bb
