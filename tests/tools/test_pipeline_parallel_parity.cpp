// Pipeline parallelism under mpirun reproduces the single-rank float64 run:
// bb-correctness's loss, grad norm, per-parameter grad norms (every stage's
// gathered), the losses and grad norms of 3 AdamW steps and the parameters
// after them (exported from every stage), to 1e-10. Layouts: pp in {2, 4}
// with vpp in {1, 2}, the balanced split and explicit pp_layouts (an
// embedding-only first and a loss-only last stage among them), mixed with tp
// and dp up to 8 ranks, on tied (qwen3_gqa) and untied (llama3_gqa, qwen3_tp)
// fixtures; 8-layer random inits where pp * vpp exceeds the fixtures' 2
// layers. Launches are few and models tiny: CI has 2 cores.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "tests/model/hf_fixture.h"
#include "tests/tools/parity_support.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

const std::string kEightLayers = " backend.load_hf_weights=false 'backend.model_overrides={\"num_layers\":8}'";

struct Layout {
  std::string name;
  std::string fixture;
  bool random8;         // 8 layers, random init
  int ranks, pp, vpp, tp;
  std::string pp_layout;
  int microbatches;     // per dp rank
};

nlohmann::json run_correctness(const Layout& l, bool parallel, const std::string& tokens, const std::string& out) {
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + test::fixture_dir(l.fixture) + " tokens=" + tokens +
                    " steps=3 optimizer.lr=0.01 optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95"
                    " optimizer.weight_decay=0.1 optimizer.clip_grad=1.0 params_out=" + out +
                    (l.random8 ? kEightLayers : "");
  if (parallel) {
    cmd += " backend.parallel.pp=" + std::to_string(l.pp) + " backend.parallel.vpp=" + std::to_string(l.vpp) +
           " backend.parallel.tp=" + std::to_string(l.tp) + " num_microbatches=" + std::to_string(l.microbatches);
    if (!l.pp_layout.empty()) cmd += " 'backend.parallel.pp_layout=" + l.pp_layout + "'";
    cmd = test::mpirun(l.ranks) + cmd;
  }
  const test::ToolResult r = test::run_command(cmd, 300);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

class PipelineParallelParity : public ::testing::TestWithParam<Layout> {};

TEST_P(PipelineParallelParity, MatchesSingleRank) {
  const Layout& l = GetParam();
  const fs::path tmp = fs::temp_directory_path() / ("bb_pp_" + std::to_string(::getpid()) + "_" + l.name);
  fs::create_directories(tmp);
  // Eight sequences of odd length, ids below every fixture's vocabulary.
  const std::string tokens = test::random_tokens_file("bb_pp_tokens_" + l.name, 7, 8, 9, 89);
  const nlohmann::json single = run_correctness(l, false, tokens, (tmp / "single").string());
  const nlohmann::json par = run_correctness(l, true, tokens, (tmp / "parallel").string());
  test::expect_same_run(par, single, l.name);
  test::expect_same_params((tmp / "parallel").string(), (tmp / "single").string(), l.name);
  fs::remove_all(tmp);
  fs::remove(tokens);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineParallelParity,
    ::testing::Values(
        Layout{"tied_pp2", "qwen3_gqa", false, 2, 2, 1, 1, "", 2},
        Layout{"untied_pp2_vpp2_edge_stages", "llama3_gqa", false, 2, 2, 2, 1, "E|t|t|L", 4},
        Layout{"tied_pp4_layout", "qwen3_gqa", false, 4, 4, 1, 1, "E|t|t|L", 5},
        Layout{"tied8_pp4_vpp2", "qwen3_gqa", true, 4, 4, 2, 1, "", 4},
        Layout{"untied8_pp2_vpp2_dp2", "llama3_gqa", true, 4, 2, 2, 1, "E,t*3|t|t*2|t*2,L", 2},
        Layout{"untied_pp2_tp2_dp2", "qwen3_tp", false, 8, 2, 1, 2, "", 3},
        Layout{"tied8_pp4_vpp1_dp2", "qwen3_gqa", true, 8, 4, 1, 1, "", 4}),
    [](const auto& info) { return info.param.name; });

// MoE under pp: Megatron's per-layer aux loss and the z-loss, each stage's
// layers adding their own (qwen3_moe_mixed: a dense layer, then two MoE
// layers; the split puts one MoE layer on each stage). Both runs use the same
// microbatches, since each microbatch has its own router statistics.
TEST(PipelineParallelMoe, PerLayerAuxLossMatchesSingleRank) {
  const fs::path tmp = fs::temp_directory_path() / ("bb_pp_moe_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string tokens = test::random_tokens_file("bb_pp_moe_tokens", 7, 8, 9, 89);
  auto run = [&](bool parallel, const std::string& out) {
    std::string cmd = test::tool("bb-correctness") + " hf_path=" + test::fixture_dir("qwen3_moe_mixed") +
                      " tokens=" + tokens + " steps=3 optimizer.lr=0.01 num_microbatches=2 params_out=" + out +
                      " 'backend.model_overrides={\"moe_aux_loss_type\":\"megatron\",\"router_z_loss_coef\":0.01}'";
    if (parallel) cmd = test::mpirun(2) + cmd + " backend.parallel.pp=2 'backend.parallel.pp_layout=E,t,t|t,L'";
    const test::ToolResult r = test::run_command(cmd, 300);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    return test::last_json_line(r.out);
  };
  const nlohmann::json single = run(false, (tmp / "single").string());
  const nlohmann::json par = run(true, (tmp / "parallel").string());
  ASSERT_TRUE(single.contains("aux_loss"));
  EXPECT_LT(test::rel(par["aux_loss"], single["aux_loss"]), 1e-10);
  EXPECT_LT(test::rel(par["loss"], single["loss"]), 1e-10);
  EXPECT_LT(test::rel(par["grad_norm"], single["grad_norm"]), 1e-10);
  ASSERT_EQ(par["losses"].size(), single["losses"].size());
  for (size_t i = 0; i < single["losses"].size(); ++i)
    EXPECT_LT(test::rel(par["losses"][i], single["losses"][i]), 1e-10) << "step " << i;
  test::expect_same_params((tmp / "parallel").string(), (tmp / "single").string(), "moe pp2");
  fs::remove_all(tmp);
  fs::remove(tokens);
}

}  // namespace
}  // namespace bb
#endif
