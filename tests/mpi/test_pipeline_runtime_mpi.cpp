// The runtime under pp = 2 (x dp = world / 2): the loss, the per-microbatch
// outputs (log-probs, token losses) and the metrics reach every stage, for a
// forward-only call, a training call and a custom loss; forward only gives
// the training call's loss; num_zeros_in_grad counts a tied embedding once.
// Parity of gradients and steps with one rank is
// tests/tools/test_pipeline_parallel_parity.cpp.
#include <gtest/gtest.h>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/mpi/mpi_test_support.h"

namespace bb {
namespace {

PackedBatch four_sequences(int dp_rank) {
  PackedBatch b;
  b.seq_lens = {5, 7, 3, 6};
  for (int i = 0; i < 21; ++i) b.input_ids.push_back((i * 37 + dp_rank * 11 + 5) % 131);
  return b;
}

// The same value on every rank of `comm` (bit for bit).
void expect_same_on_every_rank(dist::Communicator& comm, double v, const std::string& what) {
  EXPECT_EQ(comm.all_reduce_scalar(v, dist::ReduceOp::Max), -comm.all_reduce_scalar(-v, dist::ReduceOp::Max)) << what;
}

TEST(PipelineRuntime, ResultsReachEveryStage) {
  if (test::world_comm().size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa";
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.parallel.pp = 2;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  dist::Communicator& pp = rt->parallel_state().pp();
  const PackedBatch batch = four_sequences(h.dp_rank());

  ForwardResult eval;
  {
    auto mode = rt->eval_mode(h);
    eval = rt->forward_backward(h, batch, {}, 2, true);
  }
  ASSERT_EQ(eval.model_output.size(), 2u);
  EXPECT_EQ(eval.model_output[0].log_probs.size(), 12u);   // sequences 5 + 7
  EXPECT_EQ(eval.model_output[1].log_probs.size(), 9u);    // sequences 3 + 6
  double log_prob_sum = 0;
  for (const ModelOutputs& o : eval.model_output)
    for (double lp : o.log_probs) log_prob_sum += lp;
  EXPECT_LT(log_prob_sum, 0.0);
  expect_same_on_every_rank(pp, log_prob_sum, "log-probs");
  expect_same_on_every_rank(pp, eval.loss, "forward-only loss");
  expect_same_on_every_rank(pp, eval.metrics.at("loss").at(1), "microbatch 1's loss");

  auto mode = rt->train_mode(h);
  rt->zero_grad(h);
  const ForwardResult train = rt->forward_backward(h, batch, {}, 2);
  EXPECT_NEAR(train.loss, eval.loss, 1e-12 * eval.loss);
  expect_same_on_every_rank(pp, train.loss, "training loss");

  // A custom loss (the per-microbatch mean cross entropy) and its metrics.
  const LossFn mean_ce = [](const ModelOutputs& out, const PackedBatch&) {
    LossOutput lo;
    double n = 0;
    for (double tl : out.token_loss) n += tl != 0.0;
    for (double tl : out.token_loss) lo.loss += tl / n;
    lo.grad_log_probs.assign(out.log_probs.size(), 0.0);
    for (size_t t = 0; t < out.token_loss.size(); ++t)
      if (out.token_loss[t] != 0.0) lo.grad_log_probs[t] = -1.0 / n;
    lo.metrics["tokens"] = n;
    return lo;
  };
  rt->zero_grad(h);
  const ForwardResult custom = rt->forward_backward(h, batch, mean_ce, 2);
  expect_same_on_every_rank(pp, custom.loss, "custom loss");
  ASSERT_EQ(custom.metrics.at("tokens").size(), 2u);
  EXPECT_EQ(custom.metrics.at("tokens")[0], 10.0);   // 4 + 6 scored positions
  EXPECT_GT(rt->optimizer_step(h).grad_norm, 0.0);
}

// With every loss-mask entry 0 every gradient is 0, so num_zeros_in_grad is
// the parameter count: the tied embedding's copies on the first and the last
// stage count once, as in the run without pp (dp = world).
TEST(PipelineRuntime, TiedEmbeddingZerosCountOnce) {
  if (test::world_comm().size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  PackedBatch batch = four_sequences(0);
  for (int64_t& id : batch.input_ids) id %= 89;   // the fixture's vocabulary
  batch.loss_mask.assign(batch.input_ids.size(), 0.0f);
  auto zeros_in_grad = [&](int pp) {
    RuntimeConfig cfg;
    cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/llama3_tied_f16";
    cfg.backend_cfg.dtype = "float64";
    cfg.backend_cfg.parallel.pp = pp;
    auto rt = create_runtime(cfg);
    ModelHandle h = rt->build_model();
    auto mode = rt->train_mode(h);
    rt->zero_grad(h);
    rt->forward_backward(h, batch, {}, 2);
    return rt->optimizer_step(h).num_zeros_in_grad;
  };
  const int64_t whole = zeros_in_grad(1);
  EXPECT_GT(whole, 0);
  EXPECT_EQ(zeros_in_grad(2), whole);
}

}  // namespace
}  // namespace bb
