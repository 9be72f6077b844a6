// bb-train as a user runs it: the shipped tiny recipes train on the CPU and the loss falls;
// every output file is there; bad keys are one error line naming the nearest key.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace {

struct Result {
  int code;
  std::string out;
};

// Runs bb-train from the repository root, where the recipes' relative paths start.
Result run(const std::string& args) {
  const std::string cmd =
      std::string("cd " BB_SOURCE_DIR " && " BB_BINARY_DIR "/bin/bb-train ") + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/bb_train_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(BBTrain, TinyPretrainLossFallsWellBelowUniform) {
  const std::string out = fresh_dir("pretrain");
  // 200 steps of 4 x 128 tokens: about a minute on two cores.
  const Result r = run("recipe=recipes/qwen3_tiny_pretrain.json train.steps=200 train.micro_batch_size=4 "
                       "optimizer.lr_warmup_steps=20 train.eval_interval=50 train.eval_batches=2 train.log_interval=50 "
                       "output.dir=" + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json m = read_json(out + "/final_metrics.json");
  // A random init starts at the uniform loss ln(2048) = 7.62; this run reaches about 5.8
  // (last-10 mean; 6.0 after 150 steps), so 6.5 leaves margin and still proves learning.
  EXPECT_NEAR(m["first_train_loss"].get<double>(), std::log(2048.0), 0.1);
  EXPECT_LT(m["final_train_loss_avg10"].get<double>(), 6.5) << r.out;
  EXPECT_LT(m["final_valid_loss"].get<double>(), 6.8) << r.out;
  EXPECT_EQ(m["steps"], 200);
  EXPECT_EQ(m["valid_evaluations"], 4);
  EXPECT_EQ(m["skipped_updates"], 0);

  const auto records = read_jsonl(out + "/metrics.jsonl");
  std::vector<double> valid;
  int64_t train_steps = 0;
  for (const auto& rec : records) {
    if (rec["type"] == "valid") valid.push_back(rec["loss"].get<double>());
    if (rec["type"] == "train") {
      ++train_steps;
      EXPECT_EQ(rec["step"], train_steps);
      EXPECT_GT(rec["tokens_per_s"].get<double>(), 0);
      EXPECT_EQ(rec["tokens"], 4 * 129);
    }
  }
  EXPECT_EQ(train_steps, 200);
  ASSERT_EQ(valid.size(), 4u);
  EXPECT_LT(valid.back(), valid.front());
  EXPECT_NE(r.out.find("step    200/200 | loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("valid     200/200 | loss "), std::string::npos) << r.out;

  bool events = false;
  for (const auto& e : std::filesystem::directory_iterator(out))
    events |= e.path().filename().string().starts_with("events.out.tfevents.");
  EXPECT_TRUE(events);
  std::ifstream svg(out + "/loss.svg");
  const std::string plot((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(plot.find(">valid</text>"), std::string::npos);
  EXPECT_EQ(read_json(out + "/recipe.json")["train"]["steps"], 200);
}

TEST(BBTrain, TinySftTrainsOnResponsesAndSavesTheModel) {
  const std::string out = fresh_dir("sft");
  const Result r = run("recipe=recipes/qwen3_tiny_sft.json train.steps=40 train.micro_batch_size=2 "
                       "optimizer.lr_warmup_steps=5 train.eval_interval=20 train.eval_batches=1 output.save_hf=true "
                       "output.dir=" + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("sft data: 310 documents"), std::string::npos) << r.out;
  const nlohmann::json m = read_json(out + "/final_metrics.json");
  EXPECT_LT(m["final_train_loss_avg10"].get<double>(), m["first_train_loss"].get<double>() - 0.5) << r.out;
  EXPECT_EQ(m["valid_evaluations"], 2);
  EXPECT_TRUE(std::filesystem::exists(out + "/hf/config.json"));
  EXPECT_TRUE(std::filesystem::exists(out + "/hf/model.safetensors"));
}

TEST(BBTrain, TinyChatSftTrainsOnAssistantTurns) {
  const std::string out = fresh_dir("sft_chat");
  const Result r = run("recipe=recipes/qwen3_tiny_sft_chat.json train.steps=20 train.log_interval=1 "
                       "train.eval_interval=20 train.eval_batches=1 output.dir=" + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("sft data: 155 documents"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(messages, chat template qwen3)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| trained tokens "), std::string::npos) << r.out;
  const nlohmann::json m = read_json(out + "/final_metrics.json");
  EXPECT_LT(m["final_train_loss_avg10"].get<double>(), m["first_train_loss"].get<double>() - 0.5) << r.out;
  // Assistant turns only: fewer trained tokens than tokens in every step.
  std::ifstream lines(out + "/metrics.jsonl");
  int64_t steps = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] != "train") continue;
    ++steps;
    EXPECT_GT(j["loss_tokens"].get<int64_t>(), 0);
    EXPECT_LT(j["loss_tokens"].get<int64_t>(), j["tokens"].get<int64_t>());
  }
  EXPECT_EQ(steps, 20);
}

TEST(BBTrain, UnknownOverrideNamesTheNearestKey) {
  const Result r = run("recipe=recipes/qwen3_tiny_pretrain.json train.step=5");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("error: command line: unknown recipe key 'train.step'; did you mean 'train.steps'?"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(BBTrain, UnknownKeyInTheRecipeFileIsAnError) {
  const std::string path = ::testing::TempDir() + "/bb_train_bad_recipe.json";
  std::ofstream(path) << R"({"model": {"hf_path": "configs/qwen3-tiny"}, "train": {"micro_batch": 4}})";
  const Result r = run("recipe=" + path);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown recipe key 'train.micro_batch'; did you mean 'train.micro_batch_size'?"),
            std::string::npos)
      << r.out;
}

TEST(BBTrain, RecipeIsRequiredAndHelpListsKeys) {
  const Result missing = run("train.steps=5");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("recipe=FILE is required"), std::string::npos) << missing.out;
  const Result help = run("help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("optimizer.lr_warmup_steps"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("data.seq_len"), std::string::npos) << help.out;
}

}  // namespace
