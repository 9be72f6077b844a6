// Expert parallelism under mpirun reproduces the single-rank float64 run:
// bb-correctness's loss, grad norm, per-parameter grad norms (the experts
// gathered over etp and ep), the losses and grad norms of 3 AdamW steps and
// the parameters after them (exported with every expert gathered), to 1e-10.
// The grid covers each axis with few launches (docs/distributed.md, "MoE
// layouts"): ep in {1, 2, 4, 8} x etp in {1, 2}, with tp (MoE parallel
// folding: ep carved from tp x dp, e.g. tp 2 ep 4 on 8 ranks) and dp (edp),
// for qwen3_moe: the fused-layout HF fixture (6 experts, aux loss off, also
// matched against HF's numbers), the per-expert fixture's weights, and a
// random init with 8 experts. With the aux loss on, the layout changes
// nothing beside dp (the aux statistics are each dp rank's own, see
// docs/distributed.md). Bad layouts fail on every rank with the numbers named.
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

const std::string kRandomEight =
    " backend.load_hf_weights=false 'backend.model_overrides={\"num_experts\":8,\"output_router_logits\":false}'";
const std::string kNoAux = " 'backend.model_overrides={\"output_router_logits\":false}'";

// A parallel layout; dp and edp follow from the rank count.
struct Parallel {
  int tp = 1, ep = 1, etp = 1, ranks = 1;
  std::string args() const {
    return " backend.parallel.tp=" + std::to_string(tp) + " backend.parallel.ep=" + std::to_string(ep) +
           " backend.parallel.etp=" + std::to_string(etp);
  }
  std::string tag() const {
    return "tp" + std::to_string(tp) + "_ep" + std::to_string(ep) + "_etp" + std::to_string(etp) + "_ranks" +
           std::to_string(ranks);
  }
};

std::string correctness_cmd(const Parallel& p, const std::string& fixture, const std::string& tokens,
                            const std::string& extra) {
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + test::fixture_dir(fixture) + " tokens=" + tokens +
                    " steps=3 optimizer.lr=0.01 optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95"
                    " optimizer.weight_decay=0.1" + p.args() + extra;
  return p.ranks > 1 ? test::mpirun(p.ranks) + cmd : cmd;
}

nlohmann::json run_correctness(const Parallel& p, const std::string& fixture, const std::string& tokens,
                               const std::string& extra) {
  const std::string cmd = correctness_cmd(p, fixture, tokens, extra);
  const test::ToolResult r = test::run_command(cmd, 300);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

// Eight sequences (ids below the fixtures' vocabularies) so dp = 8 gives every rank one.
std::string synthetic_tokens() { return test::random_tokens_file("bb_ep_tokens", 5, 8, 9, 89); }

struct Layout {
  std::string model;   // "fused" / "experts": the HF fixtures' weights; "random8": 8 experts, random init
  Parallel parallel;
};

std::string fixture_of(const std::string& model) { return model == "fused" ? "qwen3_moe_fused" : "qwen3_moe_experts"; }
std::string extra_of(const std::string& model) {
  return model == "random8" ? kRandomEight : model == "experts" ? kNoAux : "";
}

// The single-rank run of each model, once per test program: its JSON and its exported parameters.
class ExpertParallelParity : public ::testing::TestWithParam<Layout> {
 protected:
  static fs::path tmp() { return fs::temp_directory_path() / ("bb_ep_" + std::to_string(::getpid())); }
  static const std::string& tokens() {
    static const std::string t = synthetic_tokens();
    return t;
  }
  static const nlohmann::json& single(const std::string& model) {
    static std::map<std::string, nlohmann::json> runs;
    fs::create_directories(tmp());
    if (!runs.count(model))
      runs[model] = run_correctness({}, fixture_of(model), tokens(),
                                    extra_of(model) + " params_out=" + (tmp() / ("single_" + model)).string());
    return runs[model];
  }
  static void TearDownTestSuite() {
    fs::remove_all(tmp());
    fs::remove(tokens());
  }
};

TEST_P(ExpertParallelParity, MatchesSingleRank) {
  const Layout& l = GetParam();
  const Parallel& p = l.parallel;
  const std::string tag = l.model + " " + p.tag();
  const nlohmann::json& one = single(l.model);
  const fs::path out = tmp() / (l.model + "_" + p.tag());
  const nlohmann::json par = run_correctness(p, fixture_of(l.model), tokens(), extra_of(l.model) + " params_out=" + out.string());
  if (l.model == "random8")
    ASSERT_TRUE(one["per_param_grad_norm"].contains("model.layers.0.mlp.experts.7.down_proj.weight"));
  test::expect_same_run(par, one, tag, 1e-10);
  test::expect_same_params(out.string(), (tmp() / ("single_" + l.model)).string(), tag);

  if (l.model == "fused") {   // the fixture's own tokens (two sequences: dp <= 2) against HF's numbers
    const std::string dir = test::fixture_dir(fixture_of(l.model));
    const nlohmann::json ref = test::read_json(dir + "/reference.json");
    const nlohmann::json hf = run_correctness(p, fixture_of(l.model), dir + "/tokens.json", "");
    EXPECT_LT(test::rel(hf["loss"], ref["loss"]), 1e-9) << tag;
    EXPECT_LT(test::rel(hf["grad_norm"], ref["grad_norm"]), 1e-9) << tag;
    // Under the checkpoint's own names: the fused expert tensors as HF reports them (docs/models.md).
    EXPECT_EQ(hf["per_param_grad_norm"].size(), ref["per_param_grad_norm"].size()) << tag;
    for (const auto& [name, norm] : ref["per_param_grad_norm"].items()) {
      ASSERT_TRUE(hf["per_param_grad_norm"].contains(name)) << tag << " lacks " << name;
      EXPECT_LT(test::rel(hf["per_param_grad_norm"][name], norm), 1e-8) << tag << " " << name;
    }
  }
}

// Each axis at least once: ep 1..8, etp 1 and 2, tp with ep carved across
// tp groups (tp 2 ep 4), with dp (edp > 1), and both on-disk expert layouts
// split over etp.
INSTANTIATE_TEST_SUITE_P(
    Layouts, ExpertParallelParity,
    ::testing::Values(Layout{"fused", {1, 2, 1, 2}}, Layout{"fused", {2, 2, 2, 4}}, Layout{"experts", {1, 2, 2, 4}},
                      Layout{"random8", {1, 4, 1, 4}}, Layout{"random8", {1, 2, 1, 8}}, Layout{"random8", {1, 8, 1, 8}},
                      Layout{"random8", {1, 1, 2, 2}}, Layout{"random8", {2, 1, 1, 2}}, Layout{"random8", {2, 2, 1, 2}},
                      Layout{"random8", {2, 2, 1, 4}}, Layout{"random8", {2, 4, 1, 8}},
                      Layout{"random8", {2, 4, 2, 8}}),
    [](const auto& info) { return info.param.model + "_" + info.param.parallel.tag(); });

// The aux loss is over each dp rank's tokens: ep, etp and tp give what dp alone gives.
TEST(ExpertParallelAux, SameAsDataParallelAlone) {
  const std::string tokens = synthetic_tokens();
  const nlohmann::json dp_only = run_correctness({1, 1, 1, 2}, "qwen3_moe_experts", tokens, "");
  ASSERT_TRUE(dp_only.contains("aux_loss"));
  for (const Parallel& p : {Parallel{1, 2, 1, 2}, Parallel{2, 2, 2, 4}}) {
    const nlohmann::json par = run_correctness(p, "qwen3_moe_experts", tokens, "");
    test::expect_same_run(par, dp_only, "aux " + p.tag() + " vs dp2", 1e-10);
  }
  fs::remove(tokens);
}

// One row per bad layout: the message, on every rank, and a failing exit (no hang).
TEST(ExpertParallelBadLayout, ClearErrorOnEveryRank) {
  struct Row {
    Parallel parallel;
    std::string fixture, message;
  };
  const std::vector<Row> rows = {
      {{1, 4, 1, 4}, "qwen3_moe_experts", "backend.parallel.ep = 4 does not divide the model's 6 experts"},
      {{1, 2, 1, 2}, "qwen3_tp", "backend.parallel.ep = 2 > 1 needs a model with experts; model 'qwen3' has none"},
      {{1, 1, 3, 3}, "qwen3_moe_experts", "moe_intermediate_size 20 is not divisible by backend.parallel.etp = 3"},
  };
  const std::string tokens = synthetic_tokens();
  for (const Row& row : rows) {
    const std::string cmd = correctness_cmd(row.parallel, row.fixture, tokens, "");
    const test::ToolResult r = test::run_command(cmd, 120);
    EXPECT_NE(r.code, 0) << cmd;
    size_t seen = 0;
    for (size_t at = r.out.find(row.message); at != std::string::npos; at = r.out.find(row.message, at + 1)) ++seen;
    EXPECT_EQ(seen, size_t(row.parallel.ranks)) << cmd << "\n" << r.out;
  }
  fs::remove(tokens);
}

}  // namespace
}  // namespace bb
#endif
