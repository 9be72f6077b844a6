// Every tool's `help` and key errors come from the one config schema: a key
// has the same default in every tool unless the tool's help says it overrides
// it, bare words are errors, and bad values name the key and the value.
#include <gtest/gtest.h>

#include <sstream>

#include "bumblebee/runtime/config_schema.h"
#include "tests/tools/tool_runner.h"

namespace bb {
namespace {

struct HelpLine {
  std::string type, default_value, line;
};

// key -> its help line, for the lines "  KEY TYPE DEFAULT DOC".
std::map<std::string, HelpLine> help_lines(const std::string& out) {
  std::map<std::string, HelpLine> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("  ")) continue;
    std::istringstream words(line);
    std::string key;
    HelpLine h;
    words >> key >> h.type >> h.default_value;
    h.line = line;
    lines[key] = h;
  }
  return lines;
}

std::string shown(const nlohmann::json& v) {
  if (!v.is_string()) return v.dump();
  return v.get<std::string>().empty() ? "\"\"" : v.get<std::string>();
}

TEST(ToolHelp, RuntimeKeysHaveOneDefaultUnlessAToolSaysOtherwise) {
  ConfigSchema schema("schema", "");
  schema.add_runtime_keys();
  for (const std::string tool : {"bb-bench", "bb-correctness"}) {
    const test::ToolResult r = test::run_command(test::tool(tool) + " help");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto lines = help_lines(r.out);
    for (const ConfigKey& k : schema.keys()) {
      ASSERT_TRUE(lines.count(k.name)) << tool << " help lacks " << k.name;
      const HelpLine& h = lines.at(k.name);
      EXPECT_EQ(h.type, config_type_name(k.type)) << h.line;
      if (h.line.find("[" + tool + "'s default; elsewhere " + shown(k.default_value) + "]") == std::string::npos)
        EXPECT_EQ(h.default_value, shown(k.default_value)) << tool << ": " << h.line;
    }
  }
  // The overrides the tools declare, and nothing else.
  const std::string correctness = test::run_command(test::tool("bb-correctness") + " help").out;
  int overrides = 0;
  for (const auto& [key, h] : help_lines(correctness)) overrides += h.line.find("[bb-correctness's default") != std::string::npos;
  EXPECT_EQ(overrides, 4) << correctness;
  for (const char* key : {"optimizer.lr", "optimizer.clip_grad", "optimizer.no_weight_decay_1d", "backend.dtype"})
    EXPECT_NE(help_lines(correctness).at(key).line.find("[bb-correctness's default"), std::string::npos) << key;
  EXPECT_EQ(help_lines(correctness).at("optimizer.lr").default_value, "0.001");
  EXPECT_EQ(help_lines(correctness).at("optimizer.clip_grad").default_value, "0.0");
  const std::string bench = test::run_command(test::tool("bb-bench") + " help").out;
  EXPECT_NE(help_lines(bench).at("backend.load_hf_weights").line.find("true when hf_path holds safetensors"),
            std::string::npos);
  EXPECT_NE(help_lines(bench).at("bench.steps").line.find("timed steps"), std::string::npos);
}

TEST(ToolHelp, BbTrainListsTheRuntimeKeysInRecipeSpelling) {
  const test::ToolResult r = test::run_command(test::tool("bb-train") + " help");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto lines = help_lines(r.out);
  EXPECT_EQ(lines.at("optimizer.lr").default_value, "0.0001");
  EXPECT_EQ(lines.at("optimizer.clip_grad").default_value, "1.0");
  EXPECT_EQ(lines.at("parallel.tp").type, "int");
  EXPECT_TRUE(lines.count("backend.attention_backend"));
  EXPECT_TRUE(lines.count("optimizer.no_weight_decay_1d"));
}

TEST(ToolHelp, BareWordsAndBadValuesAreOneErrorLine) {
  const std::string dir = std::string(BB_SOURCE_DIR) + "/configs/qwen3-tiny";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bb-correctness hf_path=x tokens=y garbage", "error: argument 'garbage' is not key=value"},
      {"bb-bench hf_path=x backend.parallel.tp=99999999999", "'99999999999' does not fit in a 32-bit integer"},
      {"bb-bench hf_path=x optimizer.lr=inf", "key 'optimizer.lr': 'inf' is not a finite number"},
      {"bb-correctness hf_path=x tokens=y device=cuda", "unknown key 'device'; did you mean 'backend.device'?"},
      {"bb-correctness hf_path=x tokens=y dtype=float32", "unknown key 'dtype'; did you mean 'backend.dtype'?"},
      {"bb-data preprocess input=a tokenizer=b out=c workers=0", "key 'workers': '0' is out of range"},
      {"bb-train recipe=recipes/qwen3_tiny_pretrain.json garbage", "argument 'garbage' is not key=value"},
  };
  for (const auto& [cmd, message] : cases) {
    const test::ToolResult r = test::run_command(test::tool("") + cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << cmd << "\n" << r.out;
  }
  for (const char* cmd : {"bb-data help", "bb-data preprocess help"}) {
    const test::ToolResult r = test::run_command(test::tool("") + cmd);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("on_error"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace bb
