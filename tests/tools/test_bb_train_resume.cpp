// bb-train checkpoints: a run stopped after step 3 and resumed with
// train.resume=true logs the same losses for steps 4-6 as an uninterrupted run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/tools/tool_runner.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

std::map<int64_t, double> train_losses(const std::string& out, const std::string& extra) {
  const test::ToolResult r = test::run_command(
      std::string("cd " BB_SOURCE_DIR " && ") + test::tool("bb-train") +
      " recipe=recipes/qwen3_tiny_pretrain.json train.micro_batch_size=2 train.eval_batches=0 train.log_interval=1 "
      "optimizer.lr_warmup_steps=2 optimizer.lr_decay_steps=20 "
      "output.dir=" + out + " " + extra);
  EXPECT_EQ(r.code, 0) << r.out;
  std::map<int64_t, double> losses;
  std::ifstream f(out + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "train") losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return losses;
}

TEST(BBTrainResume, ResumedRunContinuesExactly) {
  const fs::path base = fs::temp_directory_path() / ("bb_train_resume_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const std::string whole = (base / "whole").string(), parts = (base / "parts").string();
  const auto full = train_losses(whole, "train.steps=6");
  const auto first = train_losses(parts, "train.steps=3 output.save_interval=3");
  ASSERT_TRUE(fs::exists(parts + "/checkpoint/trainer_state.json"));
  const auto rest = train_losses(parts, "train.steps=6 output.save_interval=3 train.resume=true");
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(rest.size(), 3u);
  for (int64_t step = 1; step <= 3; ++step) EXPECT_EQ(first.at(step), full.at(step)) << step;
  for (int64_t step = 4; step <= 6; ++step) EXPECT_EQ(rest.at(step), full.at(step)) << step;
  fs::remove_all(base);
}

}  // namespace
}  // namespace bb
