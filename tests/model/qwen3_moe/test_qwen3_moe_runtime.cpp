// Qwen3-MoE through the runtime: full recompute re-runs each layer's forward
// inside backward without counting its router output twice in the auxiliary
// loss, and microbatches each carry their own auxiliary loss, weighted by
// their share of the loss tokens (docs/models.md).
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

struct Outcome {
  ForwardResult result;
  std::vector<double> grad_squares;
};

Outcome run_step(const std::string& recompute, int microbatches) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("qwen3_moe_mixed");
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.recompute = recompute;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  Outcome r;
  r.result = rt->forward_backward(h, test::fixture_batch("qwen3_moe_mixed"), {}, microbatches);
  for (const Parameter& p : h.model().params().params()) r.grad_squares.push_back(ops::sum_squares(p.grad));
  return r;
}

TEST(Qwen3MoeRuntime, FullRecomputeGivesTheSameLossAuxLossAndGradients) {
  const Outcome plain = run_step("none", 1), recomputed = run_step("full", 1);
  const nlohmann::json ref = test::read_json(test::fixture_dir("qwen3_moe_mixed") + "/reference.json");
  EXPECT_NEAR(recomputed.result.aux_loss, ref["aux_loss"].get<double>(), 1e-12);
  EXPECT_NEAR(recomputed.result.loss, plain.result.loss, 1e-13);
  ASSERT_EQ(recomputed.grad_squares.size(), plain.grad_squares.size());
  for (size_t i = 0; i < plain.grad_squares.size(); ++i)
    EXPECT_NEAR(recomputed.grad_squares[i], plain.grad_squares[i], 1e-12 * (1.0 + plain.grad_squares[i])) << i;
}

TEST(Qwen3MoeRuntime, MicrobatchesWeightTheirAuxLossByLossTokens) {
  const Outcome one = run_step("none", 1), two = run_step("none", 2);
  const std::vector<double>& per_mb = two.result.metrics.at("aux_loss");
  ASSERT_EQ(per_mb.size(), 2u);
  // Two equal sequences of 11 tokens: 10 loss tokens each, so weights 1/2.
  EXPECT_NEAR(two.result.aux_loss, 0.5 * (per_mb[0] + per_mb[1]), 1e-14);
  const nlohmann::json hf = test::read_json(test::fixture_dir("qwen3_moe_mixed") + "/config.json");
  const double coef = hf["router_aux_loss_coef"].get<double>();
  // The cross-entropy part does not depend on the split.
  EXPECT_NEAR(two.result.loss - coef * two.result.aux_loss, one.result.loss - coef * one.result.aux_loss, 1e-13);
}

}  // namespace
}  // namespace bb
