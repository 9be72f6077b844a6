// Training checkpoints: stopping after 2 steps, saving, and resuming in a new
// process gives the same losses and gradient norms as 4 uninterrupted steps,
// in float64 and float32, on one rank, under tp=2 x dp=2 and under pp=2 (vpp=2) x tp=2; a layout mismatch is a clear error and
// never harms the checkpoint; a corrupt shard read by one rank ends every rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/model/hf_fixture.h"
#include "tests/tools/tool_runner.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

const std::string kPipeline =
    " backend.parallel.pp=2 backend.parallel.vpp=2 'backend.parallel.pp_layout=E|t|t|L' num_microbatches=2";

std::string correctness(int ranks, int tp, const std::string& extra) {
  const std::string dir = test::fixture_dir("qwen3_tp");
  std::string cmd = test::tool("bb-correctness") + " hf_path=" + dir + " tokens=" + dir +
                    "/tokens.json optimizer.lr=0.01 optimizer.clip_grad=1.0 backend.parallel.tp=" +
                    std::to_string(tp) + " " + extra;
  return ranks > 1 ? test::mpirun(ranks) + cmd : cmd;
}

nlohmann::json run_ok(const std::string& cmd) {
  const test::ToolResult r = test::run_command(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

void check_resume(int ranks, int tp, const std::string& layout = "") {
  const fs::path ck = fs::temp_directory_path() / ("bb_resume_" + std::to_string(::getpid()) + "_" +
                                                   std::to_string(ranks) + "_" + std::to_string(tp));
  fs::remove_all(ck);
  const nlohmann::json whole = run_ok(correctness(ranks, tp, "steps=4" + layout));
  run_ok(correctness(ranks, tp, "steps=2 checkpoint_out=" + ck.string() + layout));
  const nlohmann::json resumed = run_ok(correctness(ranks, tp, "steps=2 resume_from=" + ck.string() + layout));
  ASSERT_EQ(resumed["losses"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(resumed["losses"][i].get<double>(), whole["losses"][i + 2].get<double>()) << "step " << i + 2;
    EXPECT_DOUBLE_EQ(resumed["grad_norms"][i].get<double>(), whole["grad_norms"][i + 2].get<double>());
  }
  fs::remove_all(ck);
}

TEST(CheckpointResume, OneRankContinuesExactly) { check_resume(1, 1); }
TEST(CheckpointResume, OneRankContinuesExactlyInFloat32) { check_resume(1, 1, " backend.dtype=float32"); }

#ifdef BB_WITH_MPI
TEST(CheckpointResume, TensorAndDataParallelContinueExactly) { check_resume(4, 2); }
TEST(CheckpointResume, TensorAndDataParallelContinueExactlyInFloat32) { check_resume(4, 2, " backend.dtype=float32"); }

// Each pipeline stage saves and restores its own optimizer slices (two virtual stages per rank here).
TEST(CheckpointResume, PipelineStagesContinueExactly) { check_resume(4, 2, kPipeline); }

// A corrupt shard file (read by some ranks only) must end all four ranks, not leave some waiting.
TEST(CheckpointResume, CorruptOptimizerFileEndsEveryRank) {
  const fs::path ck = fs::temp_directory_path() / ("bb_resume_corrupt_" + std::to_string(::getpid()));
  fs::remove_all(ck);
  run_ok(correctness(4, 2, "steps=1 checkpoint_out=" + ck.string()));
  const fs::path shard = ck / "state" / "rank-00001.safetensors";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(fs::file_size(shard) - 1));
  f.put('\x7f');
  f.close();
  const test::ToolResult r = test::run_command("timeout 120 " + correctness(4, 2, "steps=1 resume_from=" + ck.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: " << r.out;
  EXPECT_NE(r.out.find("state/rank-00001.safetensors is corrupt"), std::string::npos) << r.out;
  fs::remove_all(ck);
}
#endif

TEST(CheckpointResume, LayoutMismatchIsAnErrorAndKeepsTheCheckpoint) {
  const fs::path ck = fs::temp_directory_path() / ("bb_resume_mismatch_" + std::to_string(::getpid()));
  fs::remove_all(ck);
  run_ok(correctness(1, 1, "steps=1 checkpoint_out=" + ck.string()));
  const std::string dir = test::fixture_dir("llama3_gqa");
  const test::ToolResult r = test::run_command(test::tool("bb-correctness") + " hf_path=" + dir + " tokens=" + dir +
                                               "/tokens.json steps=1 resume_from=" + ck.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("another config"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(ck / "trainer_state.json"));
  const test::ToolResult missing = test::run_command(correctness(1, 1, "steps=1 resume_from=/nonexistent/ck"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("no training checkpoint at /nonexistent/ck"), std::string::npos) << missing.out;
  fs::remove_all(ck);
}

}  // namespace
}  // namespace bb
