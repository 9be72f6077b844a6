// Activation recomputation changes memory, never numbers: every recompute
// configuration (selective modules, full by block or in uniform runs, over
// all layers or the first N of the chunk) gives the float64 loss and
// gradients of recompute=none, bit for bit, on a dense and an MoE model
// (with its load-balancing loss, which a recomputed forward must not count
// twice), over one and several microbatches; the `layernorm` module also on
// a Qwen3 (q/k norm) and a DeepSeek-V3 (MLA) model, in float32 too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"
#include "tests/runtime/model_grads.h"

namespace bb {
namespace {

struct RecomputeCase {
  std::string name, mode, modules, method;
  int num_layers;
};

struct Step {
  double loss = 0, aux_loss = 0;
  std::vector<double> grads;
};

Step run(const std::string& fixture, const RecomputeCase& c, int microbatches, const std::string& dtype = "float64") {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir(fixture);
  cfg.backend_cfg.dtype = dtype;
  cfg.backend_cfg.recompute = c.mode;
  cfg.backend_cfg.recompute_modules = c.modules;
  cfg.backend_cfg.recompute_method = c.method;
  cfg.backend_cfg.recompute_num_layers = c.num_layers;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  const ForwardResult r = rt->forward_backward(h, test::fixture_batch(fixture), {}, microbatches);
  return {r.loss, r.aux_loss, test::all_grads(h)};
}

const std::vector<RecomputeCase>& dense_cases() {
  static const std::vector<RecomputeCase> cases = {
      {"selective_default", "selective", "", "block", 0},
      {"selective_core_attn", "selective", "core_attn", "block", 0},
      {"selective_mlp", "selective", "mlp", "block", 0},
      {"selective_core_attn_mlp", "selective", "core_attn, mlp", "block", 0},
      {"selective_layernorm", "selective", "layernorm", "block", 0},
      {"selective_layernorm_mlp", "selective", "layernorm,mlp", "block", 0},
      {"selective_first_layer", "selective", "core_attn,mlp", "block", 1},
      {"full", "full", "", "block", 0},
      {"full_first_layer", "full", "", "block", 1},
      {"full_uniform_1", "full", "", "uniform", 1},
      {"full_uniform_2", "full", "", "uniform", 2},
  };
  return cases;
}

std::vector<RecomputeCase> moe_cases() {
  std::vector<RecomputeCase> cases = dense_cases();
  cases.push_back({"selective_moe", "selective", "moe", "block", 0});
  cases.push_back({"selective_all", "selective", "core_attn,mlp,moe", "block", 0});
  cases.push_back({"selective_moe_first_2", "selective", "moe,mlp", "block", 2});
  cases.push_back({"selective_moe_layernorm", "selective", "moe,layernorm", "block", 0});
  return cases;
}

void expect_same_step(const std::string& fixture, const std::vector<RecomputeCase>& cases) {
  for (const int microbatches : {1, 2}) {
    const Step none = run(fixture, {"none", "none", "", "block", 0}, microbatches);
    for (const RecomputeCase& c : cases) {
      const Step s = run(fixture, c, microbatches);
      const std::string where = fixture + " " + c.name + " microbatches=" + std::to_string(microbatches);
      EXPECT_EQ(s.loss, none.loss) << where;
      EXPECT_EQ(s.aux_loss, none.aux_loss) << where;
      ASSERT_EQ(s.grads.size(), none.grads.size()) << where;
      size_t differ = 0;
      for (size_t i = 0; i < s.grads.size(); ++i) differ += s.grads[i] != none.grads[i];
      EXPECT_EQ(differ, 0u) << where << ": gradients that differ from recompute=none";
    }
  }
}

TEST(Recompute, EveryModeGivesTheGradientsOfNoneOnADenseModel) { expect_same_step("llama3_gqa", dense_cases()); }

TEST(Recompute, EveryModeGivesTheGradientsOfNoneOnAnMoEModel) { expect_same_step("qwen3_moe_mixed", moe_cases()); }

// The `layernorm` module on each model family (dense with and without q/k
// norm, MoE, MLA with shared experts), in float64 and float32: the norms'
// outputs rebuilt in backward are those forward made, bit for bit.
TEST(Recompute, LayernormGivesTheGradientsOfNoneOnEveryFamily) {
  const std::vector<RecomputeCase> cases = {
      {"layernorm", "selective", "layernorm", "block", 0},
      {"layernorm_mlp", "selective", "layernorm,mlp", "block", 0},
      {"all", "selective", "core_attn,layernorm,mlp", "block", 0},
  };
  for (const std::string fixture : {"llama3_gqa", "qwen3_gqa", "qwen3_moe_mixed", "deepseek_v3_mla"}) {
    for (const std::string dtype : {"float64", "float32"}) {
      const Step none = run(fixture, {"none", "none", "", "block", 0}, 2, dtype);
      for (const RecomputeCase& c : cases) {
        const Step s = run(fixture, c, 2, dtype);
        const std::string where = fixture + " " + dtype + " " + c.name;
        EXPECT_EQ(s.loss, none.loss) << where;
        EXPECT_EQ(s.aux_loss, none.aux_loss) << where;
        EXPECT_EQ(s.grads, none.grads) << where;
      }
    }
  }
}

std::string build_error(const std::string& fixture, const RecomputeCase& c) {
  try {
    run(fixture, c, 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Recompute, BadSettingsNameTheKeyAndValue) {
  const struct {
    std::string fixture;
    RecomputeCase c;
    std::string message;
  } cases[] = {
      {"llama3_gqa", {"", "partial", "", "block", 0}, "expected none, selective or full"},
      {"llama3_gqa", {"", "selective", "core_attn,mlpp", "block", 0}, "unknown module 'mlpp'"},
      {"llama3_gqa", {"", "selective", "moe", "block", 0}, "'moe' needs a model with MoE layers"},
      {"llama3_gqa", {"", "full", "mlp", "block", 0}, "recompute_modules='mlp' needs backend.recompute=selective"},
      {"llama3_gqa", {"", "selective", "", "uniform", 1}, "uniform needs backend.recompute=full"},
      {"llama3_gqa", {"", "full", "", "uniform", 0}, "recompute_num_layers >= 1"},
      {"llama3_gqa", {"", "full", "", "interleaved", 1}, "unknown method 'interleaved'"},
  };
  for (const auto& bad : cases) {
    const std::string msg = build_error(bad.fixture, bad.c);
    EXPECT_NE(msg.find(bad.message), std::string::npos) << bad.c.mode << " " << bad.c.modules << ": " << msg;
  }
}

}  // namespace
}  // namespace bb
