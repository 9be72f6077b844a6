// Lazily zeroed gradients through the runtime (CPU, float64): zero_grad leaves
// the last step's gradients in place as pending, so a backward that added to
// them instead of overwriting would show up as a doubled gradient. On models
// that reach every kind of gradient write (dense and MoE layers with the aux
// loss, a tied embedding, MLA with multi-token prediction, LoRA, DoRA and
// expert LoRA adapters): after zero_grad the same batch gives the same
// gradients bit for bit, without zero_grad they add up, and an optimizer step
// right after zero_grad sees zeros.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

struct Case {
  const char* name;
  const char* model;     // fixture with the checkpoint and the batch
  const char* adapter;   // fixture with a peft adapter, or empty
  const char* peft_type;
  const char* target_modules;
  const char* target_parameters;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

constexpr const char* kAllLinear = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";

RuntimeConfig config(const Case& c) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir(c.model);
  cfg.backend_cfg.device = "cpu";
  cfg.backend_cfg.dtype = "float64";
  if (*c.adapter) {
    cfg.backend_cfg.peft.type = c.peft_type;
    cfg.backend_cfg.peft.target_modules = c.target_modules;
    cfg.backend_cfg.peft.target_parameters = c.target_parameters;
    cfg.backend_cfg.peft.rank = 4;
    cfg.backend_cfg.peft.alpha = 8.0;
    cfg.backend_cfg.peft.adapter_path = test::fixture_dir(c.adapter);
  }
  return cfg;
}

std::vector<std::vector<double>> gradients(ModelHandle& h) {
  std::vector<std::vector<double>> g;
  for (Parameter& p : h.model().params().params()) {
    if (!p.requires_grad()) continue;
    EXPECT_FALSE(p.grad_pending_zero) << p.name << " is still pending after forward_backward";
    g.push_back(p.grad.to_doubles());
  }
  return g;
}

class LazyGradZeroRuntime : public testing::TestWithParam<Case> {};

TEST_P(LazyGradZeroRuntime, ZeroGradThenBackwardOverwritesAndWithoutItAccumulates) {
  const Case& c = GetParam();
  auto rt = create_runtime(config(c));
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch(c.model);
  auto train = rt->train_mode(h);

  rt->zero_grad(h);
  rt->forward_backward(h, batch, {}, 2);
  const auto first = gradients(h);
  double sum_sq = 0;
  for (const auto& g : first)
    for (double v : g) sum_sq += v * v;
  ASSERT_GT(sum_sq, 0.0) << "the batch gives no gradient to compare";

  rt->zero_grad(h);
  for (Parameter& p : h.model().params().params())
    if (p.requires_grad()) ASSERT_TRUE(p.grad_pending_zero) << p.name << ": the built-in models zero lazily";
  rt->forward_backward(h, batch, {}, 2);
  EXPECT_EQ(gradients(h), first) << "the gradients after zero_grad depend on the step before";

  rt->forward_backward(h, batch, {}, 2);
  const auto twice = gradients(h);
  ASSERT_EQ(twice.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i)
    for (size_t j = 0; j < first[i].size(); ++j)
      ASSERT_NEAR(twice[i][j], 2 * first[i][j], 1e-12 * std::max(1.0, std::abs(first[i][j])))
          << "parameter " << i << " element " << j << ": a second backward must add to the first";

  rt->zero_grad(h);
  const OptimizerStepResult s = rt->optimizer_step(h);
  EXPECT_EQ(s.grad_norm, 0.0) << "an optimizer step right after zero_grad read stale gradients";
}

INSTANTIATE_TEST_SUITE_P(
    Models, LazyGradZeroRuntime,
    testing::Values(Case{"moe_mixed", "qwen3_moe_mixed", "", "", "", ""},
                    Case{"tied_embedding", "llama3_tied_f16", "", "", "", ""},
                    Case{"mla_mtp", "deepseek_v3_mtp", "", "", "", ""},
                    Case{"lora", "qwen3_gqa", "qwen3_gqa_lora", "lora", kAllLinear, ""},
                    Case{"dora", "qwen3_gqa", "qwen3_gqa_dora", "dora", kAllLinear, ""},
                    Case{"expert_lora", "qwen3_moe_fused", "qwen3_moe_lora", "lora", "q_proj,k_proj,v_proj,o_proj",
                         "mlp.experts.gate_up_proj,mlp.experts.down_proj"}),
    [](const testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace bb
