// Context parallelism under mpirun reproduces the single-rank float64 run:
// bb-correctness's loss, grad norm, per-parameter grad norms, the losses and
// grad norms of 3 AdamW steps and the parameters after them, to 1e-10, for
// cp in {2, 4} and cp x tp x dp mixes up to 8 ranks, on GQA fixtures and
// sequences of odd lengths (every sequence padded to a multiple of 2 x cp x
// tp and split in zigzag order); with cp = 2 also HF's own numbers to 1e-9.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "tests/model/hf_fixture.h"
#include "tests/tools/parity_support.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

nlohmann::json run_correctness(int ranks, const std::string& fixture, const std::string& tokens,
                               const std::string& extra) {
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + test::fixture_dir(fixture) + " tokens=" + tokens +
                    " steps=3 optimizer.lr=0.01 optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95"
                    " optimizer.weight_decay=0.1" + extra;
  if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
  const test::ToolResult r = test::run_command(cmd, 300);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

struct Layout {
  std::string fixture;
  int cp, tp, ranks;   // dp = ranks / (cp x tp)
};

// Each fixture's single-rank run is made once and compared with its layouts.
TEST(ContextParallelParity, MatchesSingleRank) {
  const std::vector<Layout> layouts = {{"qwen3_gqa", 2, 1, 2},
                                       {"qwen3_gqa", 4, 1, 4},
                                       {"llama3_gqa", 2, 2, 4},
                                       {"qwen3_tp", 2, 2, 8}};
  // Four sequences of 13 tokens (ids below every fixture's vocabulary), so dp = 2 gives each rank two.
  const std::string tokens = test::random_tokens_file("bb_cp_tokens", 11, 4, 13, 100);
  const fs::path tmp = fs::temp_directory_path() / ("bb_cp_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  std::map<std::string, nlohmann::json> singles;
  for (const Layout& l : layouts) {
    const std::string tag = l.fixture + " cp" + std::to_string(l.cp) + " tp" + std::to_string(l.tp) + " ranks" +
                            std::to_string(l.ranks);
    const std::string single_dir = (tmp / (l.fixture + "_single")).string();
    if (!singles.count(l.fixture))
      singles[l.fixture] = run_correctness(1, l.fixture, tokens, " params_out=" + single_dir);
    const std::string par_dir = (tmp / (l.fixture + "_cp" + std::to_string(l.cp) + "_tp" + std::to_string(l.tp))).string();
    const nlohmann::json par =
        run_correctness(l.ranks, l.fixture, tokens,
                        " backend.parallel.cp=" + std::to_string(l.cp) + " backend.parallel.tp=" + std::to_string(l.tp) +
                            " params_out=" + par_dir);
    test::expect_same_run(par, singles[l.fixture], tag, 1e-10);
    test::expect_same_params(par_dir, single_dir, tag);
  }
  fs::remove_all(tmp);
  fs::remove(tokens);
}

// The fixture's own tokens (two sequences of 11) against HF transformers' numbers.
TEST(ContextParallelParity, MatchesHuggingFace) {
  const std::string dir = test::fixture_dir("qwen3_gqa");
  const nlohmann::json ref = test::read_json(dir + "/reference.json");
  const nlohmann::json hf = run_correctness(2, "qwen3_gqa", dir + "/tokens.json", " backend.parallel.cp=2");
  EXPECT_LT(test::rel(hf["loss"], ref["loss"]), 1e-9);
  EXPECT_LT(test::rel(hf["grad_norm"], ref["grad_norm"]), 1e-9);
  for (const auto& [name, norm] : ref["per_param_grad_norm"].items())
    EXPECT_LT(test::rel(hf["per_param_grad_norm"][name], norm), 1e-8) << name;
}

}  // namespace
}  // namespace bb
#endif
