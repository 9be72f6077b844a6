// Every registered model against HF transformers: logits, loss (with the MoE
// auxiliary loss where the fixture has it on, and the multi-token prediction
// loss, main and MTP loss apart, where the fixture has an MTP layer), global and per-parameter
// gradient norms (under the checkpoint's names) and a 5-step AdamW
// trajectory, in float64 (HF's model code evaluated in float64) and float32.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "bumblebee/ops/ops.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

struct Tolerance {
  double logits, loss, grad_norm, per_param, losses;
};

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

void check_fixture(const std::string& name, const std::string& dtype, const Tolerance& tol) {
  const nlohmann::json ref = test::read_json(test::fixture_dir(name) + "/reference.json");
  const nlohmann::json& adamw = ref["adamw"];
  RuntimeConfig cfg;
  cfg.backend = dtype == "float64" ? "ref" : "bb";
  cfg.hf_path = test::fixture_dir(name);
  cfg.backend_cfg.dtype = dtype;
  OptimizerConfig& o = cfg.backend_cfg.optimizer;
  o.lr = adamw["lr"];
  o.adam_beta1 = adamw["beta1"];
  o.adam_beta2 = adamw["beta2"];
  o.adam_eps = adamw["eps"];
  o.weight_decay = adamw["weight_decay"];
  o.clip_grad = 0.0;
  o.no_weight_decay_1d = false;   // torch.optim.AdamW: one weight decay for every parameter
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch(name);

  // Logits: max |ours - HF| / max |HF|.
  const std::vector<double> ours = rt->logits(h, batch).to_doubles();
  const std::vector<double> theirs = test::fixture_logits(name);
  ASSERT_EQ(ours.size(), theirs.size()) << name;
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    max_err = std::max(max_err, std::abs(ours[i] - theirs[i]));
    max_ref = std::max(max_ref, std::abs(theirs[i]));
  }
  EXPECT_LT(max_err / max_ref, tol.logits) << name << " logits";

  auto train = rt->train_mode(h);
  const int steps = adamw["steps"];
  for (int step = 0; step < steps; ++step) {
    rt->zero_grad(h);
    ForwardResult r = rt->forward_backward(h, batch);
    EXPECT_LT(rel(r.loss, ref["losses"][step].get<double>()), tol.losses) << name << " loss before step " << step;
    if (step == 0) {
      EXPECT_LT(rel(r.loss, ref["loss"].get<double>()), tol.loss) << name << " loss";
      if (ref.contains("aux_loss")) EXPECT_LT(rel(r.aux_loss, ref["aux_loss"].get<double>()), tol.loss) << name;
      else EXPECT_EQ(r.aux_loss, 0.0) << name;
      // Multi-token prediction: the main and the MTP loss apart (the loss above is main + scale x mtp).
      if (ref.contains("mtp_loss")) {
        ASSERT_TRUE(r.metrics.count("mtp_loss")) << name << ": no mtp_loss metric";
        EXPECT_LT(rel(r.metrics["mtp_loss"].at(0), ref["mtp_loss"].get<double>()), tol.loss) << name << " mtp_loss";
        EXPECT_LT(rel(r.metrics["loss"].at(0), ref["main_loss"].get<double>()), tol.loss) << name << " main loss";
      }
      double total = 0;
      std::map<std::string, double> squares;   // by checkpoint name (fused experts sum their parts)
      for (const Parameter& p : h.model().params().params()) {
        if (!p.requires_grad()) continue;   // a buffer (DeepSeek-V3's expert bias): HF has no gradient either
        const double sq = ops::sum_squares(p.grad);
        total += sq;
        squares[test::checkpoint_name(p.name, ref["per_param_grad_norm"])] += sq;
      }
      for (const auto& [n, sq] : squares) {
        ASSERT_TRUE(ref["per_param_grad_norm"].contains(n)) << name << ": HF has no parameter " << n;
        EXPECT_LT(rel(std::sqrt(sq), ref["per_param_grad_norm"][n].get<double>()), tol.per_param) << name << " " << n;
      }
      EXPECT_EQ(squares.size(), ref["per_param_grad_norm"].size()) << name << ": parameter count differs from HF";
      EXPECT_LT(rel(std::sqrt(total), ref["grad_norm"].get<double>()), tol.grad_norm) << name << " grad_norm";
    }
    OptimizerStepResult s = rt->optimizer_step(h);
    ASSERT_TRUE(s.update_successful);
    if (step == 0) EXPECT_LT(rel(s.grad_norm, ref["grad_norm"].get<double>()), tol.grad_norm) << name;
    rt->lr_scheduler_step(h);
  }
}

class HFParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HFParity, Float64MatchesTransformers) { check_fixture(GetParam(), "float64", {1e-9, 1e-9, 1e-9, 1e-8, 1e-8}); }

TEST_P(HFParity, Float32MatchesTransformers) { check_fixture(GetParam(), "float32", {1e-4, 1e-4, 1e-4, 1e-4, 1e-4}); }

INSTANTIATE_TEST_SUITE_P(Fixtures, HFParity, ::testing::ValuesIn(test::fixture_names()));

}  // namespace
}  // namespace bb
