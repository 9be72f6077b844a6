// Training checkpoints reshard on load: 2 steps at layout A, save, resume at
// layout B for 2 more steps; the losses and gradient norms equal those of 4
// steps on one rank (float64 CPU, to 1e-10). Dense (qwen3_tp) with tp, pp,
// vpp and dp changed; MoE (qwen3_moe_experts widened to 8 random experts) with
// ep and tp changed. bb-convert reshard writes a checkpoint at another layout
// that resumes alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "tests/model/hf_fixture.h"
#include "tests/tools/parity_support.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

const std::string kEightExperts =
    " backend.load_hf_weights=false 'backend.model_overrides={\"num_experts\":8,\"output_router_logits\":false}'";

struct Layout {
  int ranks = 1;
  std::string args;   // backend.parallel.* keys
};

struct Reshard {
  std::string name, model;   // "dense" or "moe"
  Layout save, load;
};

std::string fixture_of(const std::string& model) { return model == "moe" ? "qwen3_moe_experts" : "qwen3_tp"; }

// Eight sequences of ids below both fixtures' vocabularies, so dp = 4 gives every rank two.
const std::string& tokens() {
  static const std::string t = test::random_tokens_file("bb_reshard_tokens", 5, 8, 9, 89);
  return t;
}

std::string correctness(const std::string& model, const Layout& l, const std::string& extra) {
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + test::fixture_dir(fixture_of(model)) +
                    " tokens=" + tokens() + " optimizer.lr=0.01 optimizer.weight_decay=0.1 " + l.args + " " + extra +
                    (model == "moe" ? kEightExperts : "");
  return l.ranks > 1 ? test::mpirun(l.ranks) + cmd : cmd;
}

nlohmann::json run_ok(const std::string& cmd) {
  const test::ToolResult r = test::run_command(cmd, 300);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

// 4 uninterrupted steps on one rank, once per model.
const nlohmann::json& whole(const std::string& model) {
  static std::map<std::string, nlohmann::json> runs;
  if (!runs.count(model)) runs[model] = run_ok(correctness(model, {}, "steps=4"));
  return runs[model];
}

void expect_continues(const nlohmann::json& resumed, const nlohmann::json& all, const std::string& tag) {
  ASSERT_EQ(resumed["losses"].size(), 2u) << tag;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_LT(test::rel(resumed["losses"][i], all["losses"][i + 2]), 1e-10) << tag << " step " << i + 2;
    EXPECT_LT(test::rel(resumed["grad_norms"][i], all["grad_norms"][i + 2]), 1e-10) << tag << " step " << i + 2;
  }
}

fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / ("bb_reshard_" + name + "_" + std::to_string(::getpid()));
}

class CheckpointReshard : public ::testing::TestWithParam<Reshard> {};

TEST_P(CheckpointReshard, ResumesAtAnotherLayoutAsIfNeverChanged) {
  const Reshard& r = GetParam();
  const fs::path ck = temp(r.name);
  fs::remove_all(ck);
  run_ok(correctness(r.model, r.save, "steps=2 checkpoint_out=" + ck.string()));
  expect_continues(run_ok(correctness(r.model, r.load, "steps=2 resume_from=" + ck.string())), whole(r.model), r.name);
  fs::remove_all(ck);
}

const std::string kPipeline = "backend.parallel.pp=2 num_microbatches=2";
const std::string kVirtualPipeline =
    "backend.parallel.pp=2 backend.parallel.vpp=2 'backend.parallel.pp_layout=E|t|t|L' num_microbatches=2";

INSTANTIATE_TEST_SUITE_P(
    Layouts, CheckpointReshard,
    ::testing::Values(
        Reshard{"tp2_pp2_to_tp4", "dense", {4, "backend.parallel.tp=2 " + kPipeline}, {4, "backend.parallel.tp=4"}},
        Reshard{"dp2_to_dp4", "dense", {2, ""}, {4, ""}},
        Reshard{"tp2_vpp2_to_dp2", "dense", {4, "backend.parallel.tp=2 " + kVirtualPipeline}, {2, ""}},
        Reshard{"ep2_to_ep1", "moe", {2, "backend.parallel.ep=2"}, {1, ""}},
        Reshard{"ep2_to_tp2_ep4", "moe", {2, "backend.parallel.ep=2"}, {4, "backend.parallel.tp=2 backend.parallel.ep=4 backend.parallel.etp=1"}}),
    [](const ::testing::TestParamInfo<Reshard>& info) { return info.param.name; });

// bb-convert reshard: a checkpoint saved at tp 2 x dp 2, rewritten at dp 4,
// resumes at dp 4 as the original would.
TEST(BBConvertReshard, WritesACheckpointThatResumesAtTheNewLayout) {
  const fs::path ck = temp("convert_in"), out = temp("convert_out");
  fs::remove_all(ck);
  fs::remove_all(out);
  run_ok(correctness("dense", {4, "backend.parallel.tp=2"}, "steps=2 checkpoint_out=" + ck.string()));
  const std::string cmd = test::mpirun(4) + test::tool("bb-convert") + " reshard in=" + ck.string() +
                          " out=" + out.string();
  const test::ToolResult r = test::run_command(cmd, 300);
  ASSERT_EQ(r.code, 0) << cmd << "\n" << r.out;
  EXPECT_NE(r.out.find("GB/s"), std::string::npos) << r.out;
  expect_continues(run_ok(correctness("dense", {4, ""}, "steps=2 resume_from=" + out.string())), whole("dense"),
                   "bb-convert reshard");
  fs::remove_all(ck);
  fs::remove_all(out);
}

}  // namespace
}  // namespace bb
#endif
