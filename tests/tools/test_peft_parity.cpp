// LoRA and DoRA under tensor and data parallelism: bb-correctness with the HF
// peft adapter of tests/fixtures/qwen3_gqa_lora or _dora (every A and B nonzero) on all
// seven projections, under mpirun at tp=2 (dp 1 and 2), reproduces the
// single-rank float64 run to 1e-10: loss, every adapter gradient norm, three
// AdamW steps' losses and grad norms, and the merged weights W + s B A after
// them (peft.merge_on_export, so the exported model carries the trained adapters;
// for DoRA (m / ||W + s B A||) (W + s B A), whose row norm is all-reduced over tp
// for the row-parallel projections). LoRA on the fused MoE experts
// (tests/fixtures/qwen3_moe_lora, peft's target_parameters) at ep = 2 and
// tp = 2 with ep = 2 reproduces the single-rank run the same way, and the
// saved adapters (each ep rank's experts gathered into peft's fused tensors)
// agree to 1e-10.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/safetensors.h"
#include "tests/model/hf_fixture.h"
#include "tests/tools/parity_support.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

nlohmann::json run_adapter(const std::string& type, int ranks, int tp, const std::string& params_out) {
  const std::string base = test::fixture_dir("qwen3_gqa");
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + base + " tokens=" + base + "/tokens.json" +
                    " steps=3 optimizer.lr=0.01 peft.type=" + type + " peft.target_modules=all-linear peft.rank=4"
                    " peft.alpha=8 peft.adapter_path=" + test::fixture_dir("qwen3_gqa_" + type) +
                    " peft.merge_on_export=true export.dtype=param backend.parallel.tp=" + std::to_string(tp) +
                    " params_out=" + params_out;
  if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
  const test::ToolResult r = test::run_command(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

struct Layout {
  std::string type;
  int tp, dp;
};

class PeftParity : public ::testing::TestWithParam<Layout> {};

TEST_P(PeftParity, MatchesSingleRank) {
  const auto [type, tp, dp] = GetParam();
  const std::string tag = type + "_tp" + std::to_string(tp) + "_dp" + std::to_string(dp);
  const fs::path tmp = fs::temp_directory_path() / ("bb_peft_parity_" + std::to_string(::getpid()) + "_" + tag);
  fs::create_directories(tmp);
  const nlohmann::json single = run_adapter(type, 1, 1, (tmp / "single").string());
  const nlohmann::json par = run_adapter(type, tp * dp, tp, (tmp / "parallel").string());
  // A and B (and DoRA's magnitude) of seven projections in each of two layers.
  EXPECT_EQ(single["per_param_grad_norm"].size(), (type == "dora" ? 3u : 2u) * 7 * 2) << "adapters only";
  test::expect_same_run(par, single, tag);
  test::expect_same_params((tmp / "parallel").string(), (tmp / "single").string(), tag);
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PeftParity,
                         ::testing::Values(Layout{"lora", 2, 1}, Layout{"lora", 2, 2}, Layout{"dora", 2, 1},
                                           Layout{"dora", 2, 2}),
                         [](const auto& info) {
                           return info.param.type + "_tp" + std::to_string(info.param.tp) + "_dp" +
                                  std::to_string(info.param.dp);
                         });

nlohmann::json run_expert_adapter(int ranks, const std::string& args, const std::string& adapter_out) {
  const std::string base = test::fixture_dir("qwen3_moe_fused");
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + base + " tokens=" + base + "/tokens.json" +
                    " steps=3 optimizer.lr=0.01 peft.type=lora peft.target_modules=q_proj,k_proj,v_proj,o_proj"
                    " peft.target_parameters=mlp.experts.gate_up_proj,mlp.experts.down_proj peft.rank=4"
                    " peft.alpha=8 peft.adapter_path=" + test::fixture_dir("qwen3_moe_lora") + args +
                    " adapter_out=" + adapter_out;
  if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
  const test::ToolResult r = test::run_command(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

struct ExpertLayout {
  std::string name, args;
  int ranks;
};

class ExpertPeftParity : public ::testing::TestWithParam<ExpertLayout> {};

TEST_P(ExpertPeftParity, MatchesSingleRank) {
  const ExpertLayout& l = GetParam();
  const fs::path tmp = fs::temp_directory_path() / ("bb_expert_peft_parity_" + std::to_string(::getpid()) + "_" + l.name);
  fs::create_directories(tmp);
  const nlohmann::json single = run_expert_adapter(1, "", (tmp / "single").string());
  const nlohmann::json par = run_expert_adapter(l.ranks, l.args, (tmp / "parallel").string());
  test::expect_same_run(par, single, l.name);
  const SafetensorsFile x = SafetensorsFile::open((tmp / "parallel/adapter_model.safetensors").string());
  const SafetensorsFile y = SafetensorsFile::open((tmp / "single/adapter_model.safetensors").string());
  ASSERT_EQ(x.names(), y.names()) << l.name;
  for (const std::string& n : y.names()) {
    const std::vector<double> u = x.get(n).to_doubles(), v = y.get(n).to_doubles();
    double err = 0, norm = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      err = std::max(err, std::abs(u[i] - v[i]));
      norm = std::max(norm, std::abs(v[i]));
    }
    EXPECT_LT(err / norm, 1e-10) << l.name << " adapter tensor " << n;
  }
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExpertPeftParity,
                         ::testing::Values(ExpertLayout{"ep2", " backend.parallel.ep=2", 2},
                                           ExpertLayout{"tp2_ep2_etp1",
                                                        " backend.parallel.tp=2 backend.parallel.ep=2"
                                                        " backend.parallel.etp=1",
                                                        4}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace bb
#endif
