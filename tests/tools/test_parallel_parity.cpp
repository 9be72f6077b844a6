// Tensor- and data-parallel runs under mpirun reproduce the single-rank
// float64 run (losses, grad norms, parameters after 3 AdamW steps) and the HF
// fixture's numbers, for tp in {1,2,4} x dp in {1,2,4} up to 8 ranks.
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

const std::string kFixture = "qwen3_tp";

nlohmann::json run_correctness(int ranks, int tp, const std::string& tokens, const std::string& params_out) {
  const std::string dir = test::fixture_dir(kFixture);
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + dir + " tokens=" + tokens +
                    " steps=3 optimizer.lr=0.01 optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95"
                    " optimizer.weight_decay=0.1 backend.parallel.tp=" + std::to_string(tp) +
                    " params_out=" + params_out;
  if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
  const test::ToolResult r = test::run_command(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

// Eight sequences so that dp = 4 still gives every rank two.
std::string synthetic_tokens() { return test::random_tokens_file("bb_parallel_tokens", 7, 8, 9, 157); }

struct Layout {
  int tp, dp;
};

class ParallelParity : public ::testing::TestWithParam<Layout> {};

TEST_P(ParallelParity, MatchesSingleRankAndHF) {
  const auto [tp, dp] = GetParam();
  const std::string tag = "tp" + std::to_string(tp) + "_dp" + std::to_string(dp);
  const fs::path tmp = fs::temp_directory_path() / ("bb_parallel_" + std::to_string(::getpid()) + "_" + tag);
  fs::create_directories(tmp);
  const std::string tokens = synthetic_tokens();
  const nlohmann::json single = run_correctness(1, 1, tokens, (tmp / "single").string());
  const nlohmann::json par = run_correctness(tp * dp, tp, tokens, (tmp / "parallel").string());
  EXPECT_LT(test::rel(par["loss"], single["loss"]), 1e-10) << tag;
  EXPECT_LT(test::rel(par["grad_norm"], single["grad_norm"]), 1e-10) << tag;
  for (size_t i = 0; i < single["losses"].size(); ++i)
    EXPECT_LT(test::rel(par["losses"][i], single["losses"][i]), 1e-10) << tag << " step " << i;
  for (const auto& [name, norm] : single["per_param_grad_norm"].items())
    EXPECT_LT(test::rel(par["per_param_grad_norm"][name], norm), 1e-10) << tag << " " << name;
  test::expect_same_params((tmp / "parallel").string(), (tmp / "single").string(), tag);

  if (dp <= 2) {   // the fixture's two sequences split over at most two dp ranks
    const std::string dir = test::fixture_dir(kFixture);
    const nlohmann::json ref = test::read_json(dir + "/reference.json");
    const nlohmann::json hf = run_correctness(tp * dp, tp, dir + "/tokens.json", (tmp / "hf").string());
    EXPECT_LT(test::rel(hf["loss"], ref["loss"]), 1e-9) << tag;
    EXPECT_LT(test::rel(hf["grad_norm"], ref["grad_norm"]), 1e-9) << tag;
    for (size_t i = 0; i < hf["losses"].size(); ++i)
      EXPECT_LT(test::rel(hf["losses"][i], ref["losses"][i]), 1e-9) << tag << " step " << i;
    for (const auto& [name, norm] : ref["per_param_grad_norm"].items())
      EXPECT_LT(test::rel(hf["per_param_grad_norm"][name], norm), 1e-8) << tag << " " << name;
  }
  fs::remove_all(tmp);
  fs::remove(tokens);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ParallelParity,
                         ::testing::Values(Layout{1, 2}, Layout{1, 4}, Layout{2, 1}, Layout{2, 2}, Layout{2, 4},
                                           Layout{4, 1}, Layout{4, 2}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_dp" + std::to_string(info.param.dp);
                         });

}  // namespace
}  // namespace bb
#endif
