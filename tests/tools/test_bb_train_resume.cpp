// bb-train checkpoints: a run stopped after step 3 and resumed with
// train.resume=true logs the same losses for steps 4-6 as an uninterrupted run,
// and its logs cover the whole run: metrics.jsonl holds steps 1-6 exactly once
// (lines an earlier part wrote past its checkpoint are dropped), the earlier
// event file stays beside the new one, loss.svg plots all six steps. A run that
// fails (a bad key or value, a damaged or incomplete checkpoint) leaves the
// earlier run's logs byte-identical and its checkpoint in place.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/tools/tool_runner.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

test::ToolResult train(const std::string& out, const std::string& extra) {
  return test::run_command(
      std::string("cd " BB_SOURCE_DIR " && ") + test::tool("bb-train") +
      " recipe=recipes/qwen3_tiny_pretrain.json train.micro_batch_size=2 train.eval_batches=0 train.log_interval=1 "
      "optimizer.lr_warmup_steps=2 optimizer.lr_decay_steps=20 "
      "output.dir=" + out + " " + extra);
}

// Every train record of metrics.jsonl: step -> losses logged for it (more than one: logged twice).
std::map<int64_t, std::vector<double>> train_losses(const std::string& out) {
  std::map<int64_t, std::vector<double>> losses;
  std::ifstream f(out + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "train") losses[j["step"].get<int64_t>()].push_back(j["loss"].get<double>());
  }
  return losses;
}

std::map<int64_t, double> run_ok(const std::string& out, const std::string& extra) {
  const test::ToolResult r = train(out, extra);
  EXPECT_EQ(r.code, 0) << r.out;
  std::map<int64_t, double> once;
  for (const auto& [step, losses] : train_losses(out)) {
    EXPECT_EQ(losses.size(), 1u) << "step " << step << " logged " << losses.size() << " times";
    once[step] = losses.front();
  }
  return once;
}

int event_files(const std::string& out) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(out)) n += e.path().filename().string().starts_with("events.out.tfevents.");
  return n;
}

// The points of the train curve (the first polyline) of loss.svg.
size_t plotted_train_points(const std::string& out) {
  const std::string svg = test::read_bytes(out + "/loss.svg");
  const size_t at = svg.find("points=\"", svg.find("<polyline"));
  const std::string pts = svg.substr(at + 8, svg.find('"', at + 8) - at - 8);
  return size_t(std::count(pts.begin(), pts.end(), ','));
}

fs::path fresh_base(const std::string& name) {
  const fs::path base = fs::temp_directory_path() / ("bb_train_resume_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(base);
  return base;
}

TEST(BBTrainResume, ResumedRunContinuesExactlyAndKeepsTheWholeLog) {
  const fs::path base = fresh_base("exact");
  const std::string whole = (base / "whole").string(), parts = (base / "parts").string();
  const auto full = run_ok(whole, "train.steps=6");
  const auto first = run_ok(parts, "train.steps=3 output.save_interval=3");
  ASSERT_TRUE(fs::exists(parts + "/checkpoint/manifest.json"));
  // A kill after the save at step 3 can leave a later step and half a line in the log.
  std::ofstream(parts + "/metrics.jsonl", std::ios::app) << R"({"type":"train","step":4,"loss":99.0})" "\n"
                                                         << R"({"type":"train","st)";
  const auto rest = run_ok(parts, "train.steps=6 output.save_interval=3 train.resume=true");
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(rest.size(), 6u);
  for (int64_t step = 1; step <= 6; ++step) EXPECT_EQ(rest.at(step), full.at(step)) << step;
  EXPECT_EQ(event_files(parts), 2);
  EXPECT_EQ(plotted_train_points(parts), 6u);
  std::ifstream f(parts + "/final_metrics.json");
  const nlohmann::json m = nlohmann::json::parse(f);
  EXPECT_EQ(m["first_train_loss"].get<double>(), full.at(1));
  EXPECT_EQ(m["final_train_loss"].get<double>(), full.at(6));
  EXPECT_EQ(m["resumed_after_step"], 3);
  fs::remove_all(base);
}

// Every regular file of a run's output outside its checkpoint, with its bytes.
std::map<std::string, std::string> logs_of(const std::string& out) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    const std::string rel = fs::relative(e.path(), out).generic_string();
    if (e.is_regular_file() && !rel.starts_with("checkpoint")) files[rel] = test::read_bytes(e.path());
  }
  return files;
}

struct FailedRun {
  const char* name;
  std::string extra;                                    // on top of train.steps=6 train.resume=true
  std::function<void(const std::string& ck)> damage;    // to the checkpoint before the run
  std::vector<std::string> words;                       // the error must hold them
};

TEST(BBTrainResume, AFailedRunLeavesTheEarlierLogsAndCheckpoint) {
  const fs::path base = fresh_base("failed");
  const std::string out = (base / "run").string(), ck = out + "/checkpoint", pristine = (base / "ck").string();
  run_ok(out, "train.steps=2 output.save_interval=2");
  fs::copy(ck, pristine, fs::copy_options::recursive);
  const std::map<std::string, std::string> before = logs_of(out);
  ASSERT_TRUE(before.contains("metrics.jsonl"));
  ASSERT_TRUE(before.contains("loss.svg"));
  auto flip = [](const std::string& path) {
    std::string s = test::read_bytes(path);
    s[s.size() / 2] = char(s[s.size() / 2] ^ 0xFF);
    std::ofstream(path, std::ios::binary) << s;
  };
  const std::vector<FailedRun> rows = {
      {"unknown key", "train.stepz=6", {}, {"unknown recipe key 'train.stepz'"}},
      {"bad value", "optimizer.lr=-1", {}, {"optimizer.lr", "-1"}},
      {"runtime layout", "parallel.tp=3", {}, {"tp 3"}},
      {"model config", "model.hf_path=/nonexistent", {}, {"/nonexistent"}},
      {"flipped shard byte", "",
       [&](const std::string& c) { flip(c + "/state/rank-00000.safetensors"); },
       {"state/rank-00000.safetensors", "corrupt"}},
      {"truncated shard", "",
       [&](const std::string& c) { fs::resize_file(c + "/state/rank-00000.safetensors", 100); },
       {"state/rank-00000.safetensors is 100 bytes"}},
      {"no trainer state", "", [&](const std::string& c) { fs::remove(c + "/trainer_state.json"); },
       {"no complete training checkpoint", "trainer_state.json is missing"}},
  };
  for (const FailedRun& row : rows) {
    fs::remove_all(ck);
    fs::copy(pristine, ck, fs::copy_options::recursive);
    if (row.damage) row.damage(ck);
    const std::string damaged = test::read_bytes(ck + "/manifest.json");
    const test::ToolResult r = train(out, "train.steps=6 train.resume=true " + row.extra);
    SCOPED_TRACE(std::string(row.name) + ": " + r.out);
    EXPECT_EQ(r.code, 1);
    for (const std::string& w : row.words) EXPECT_NE(r.out.find(w), std::string::npos) << w;
    EXPECT_TRUE(logs_of(out) == before);
    EXPECT_TRUE(fs::exists(ck + "/manifest.json"));
    EXPECT_EQ(test::read_bytes(ck + "/manifest.json"), damaged);
  }
  fs::remove_all(base);
}

}  // namespace
}  // namespace bb
