// LoRA under tensor and data parallelism: bb-correctness with the HF peft
// adapter of tests/fixtures/qwen3_gqa_lora (every A and B nonzero) on all
// seven projections, under mpirun at tp=2 (dp 1 and 2), reproduces the
// single-rank float64 run to 1e-10: loss, every adapter gradient norm, three
// AdamW steps' losses and grad norms, and the merged weights W + s B A after
// them (peft.merge_on_export, so the exported model carries the trained adapters).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/model/hf_fixture.h"
#include "tests/tools/parity_support.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

nlohmann::json run_lora(int ranks, int tp, const std::string& params_out) {
  const std::string base = test::fixture_dir("qwen3_gqa");
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + base + " tokens=" + base + "/tokens.json" +
                    " steps=3 optimizer.lr=0.01 peft.type=lora peft.target_modules=all-linear peft.rank=4"
                    " peft.alpha=8 peft.adapter_path=" + test::fixture_dir("qwen3_gqa_lora") +
                    " peft.merge_on_export=true export.dtype=param backend.parallel.tp=" + std::to_string(tp) +
                    " params_out=" + params_out;
  if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
  const test::ToolResult r = test::run_command(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

struct Layout {
  int tp, dp;
};

class PeftParity : public ::testing::TestWithParam<Layout> {};

TEST_P(PeftParity, LoraMatchesSingleRank) {
  const auto [tp, dp] = GetParam();
  const std::string tag = "tp" + std::to_string(tp) + "_dp" + std::to_string(dp);
  const fs::path tmp = fs::temp_directory_path() / ("bb_peft_parity_" + std::to_string(::getpid()) + "_" + tag);
  fs::create_directories(tmp);
  const nlohmann::json single = run_lora(1, 1, (tmp / "single").string());
  const nlohmann::json par = run_lora(tp * dp, tp, (tmp / "parallel").string());
  EXPECT_EQ(single["per_param_grad_norm"].size(), 2u * 7 * 2) << "adapters only";
  test::expect_same_run(par, single, tag);
  test::expect_same_params((tmp / "parallel").string(), (tmp / "single").string(), tag);
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PeftParity, ::testing::Values(Layout{2, 1}, Layout{2, 2}), [](const auto& info) {
  return "tp" + std::to_string(info.param.tp) + "_dp" + std::to_string(info.param.dp);
});

}  // namespace
}  // namespace bb
#endif
