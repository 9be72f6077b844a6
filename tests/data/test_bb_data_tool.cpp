// End to end: the built bb-data binary preprocesses a small JSONL and inspects the result;
// malformed input, a corrupt .idx and a mistyped key fail with one clear error line.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data_test_support.h"

using bb::test::TempDir;
using bb::test::write_file;

namespace {

struct ToolRun {
  int status = -1;
  std::string out, err;
};

// Runs bb-data with `args`, capturing stdout and stderr.
ToolRun bb_data(const std::string& args, const TempDir& dir) {
  const std::string binary = BB_BINARY_DIR "/bin/bb-data";
  EXPECT_TRUE(std::filesystem::exists(binary)) << binary << " is not built (ninja bb-data)";
  const std::string err_path = dir / "stderr.txt";
  ToolRun r;
  FILE* p = ::popen((binary + " " + args + " 2>" + err_path).c_str(), "r");
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = bb::test::read_file(err_path);
  std::filesystem::remove(err_path);
  return r;
}

}  // namespace

TEST(BbDataTool, PreprocessThenInspect) {
  BB_SKIP_WITHOUT_PCRE2();
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 40; ++i) jsonl += "{\"text\": \"Document number " + std::to_string(i) + " of the test.\"}\n";
  write_file(dir / "in.jsonl", jsonl);
  const ToolRun pre = bb_data("preprocess input=" + dir / "in.jsonl" + " tokenizer=" BB_SOURCE_DIR
                          "/data/tokenizer.json out=" + dir / "ds" + " workers=2",
                          dir);
  ASSERT_EQ(pre.status, 0) << pre.err;
  EXPECT_NE(pre.err.find("100.0%"), std::string::npos) << pre.err;
  EXPECT_NE(pre.err.find("docs/s"), std::string::npos) << pre.err;
  EXPECT_NE(pre.err.find("tokens/s"), std::string::npos) << pre.err;
  EXPECT_NE(pre.err.find("MB/s"), std::string::npos) << pre.err;

  const ToolRun inspect = bb_data("inspect " + dir / "ds", dir);
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  const auto j = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(j["dtype"], "uint16");
  EXPECT_EQ(j["sequence_count"], 40);
  EXPECT_EQ(j["document_count"], 40);
  EXPECT_EQ(j["total_tokens"].get<int64_t>(), int64_t(std::filesystem::file_size(dir / "ds.bin") / 2));
  EXPECT_GT(j["total_tokens"].get<int64_t>(), 40 * 5);
}

TEST(BbDataTool, MalformedLineFailsOrIsSkipped) {
  BB_SKIP_WITHOUT_PCRE2();
  TempDir dir;
  write_file(dir / "in.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"broken\"\n{\"text\": \"fine too\"}\n");
  const std::string common =
      "preprocess input=" + dir / "in.jsonl" + " tokenizer=" BB_SOURCE_DIR "/data/tokenizer.json out=" + dir / "ds";
  const ToolRun fail = bb_data(common, dir);
  EXPECT_EQ(fail.status, 1);
  EXPECT_NE(fail.err.find("error: " + dir / "in.jsonl" + ":2: malformed JSON"), std::string::npos) << fail.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "ds.idx"));

  const ToolRun skip = bb_data(common + " on_error=skip", dir);
  ASSERT_EQ(skip.status, 0) << skip.err;
  EXPECT_NE(skip.err.find("warning: " + dir / "in.jsonl" + ":2:"), std::string::npos) << skip.err;
  EXPECT_EQ(nlohmann::json::parse(bb_data("inspect " + dir / "ds", dir).out)["document_count"], 2);
}

TEST(BbDataTool, CorruptIndexAndBadArgumentsAreClearErrors) {
  TempDir dir;
  write_file(dir / "bad.idx", "NOTMEGATRON-INDEX-AT-ALL-BUT-LONG-ENOUGH");
  write_file(dir / "bad.bin", "");
  const ToolRun corrupt = bb_data("inspect " + dir / "bad", dir);
  EXPECT_EQ(corrupt.status, 1);
  EXPECT_NE(corrupt.err.find("error: " + dir / "bad.idx: not a Megatron indexed dataset index"), std::string::npos)
      << corrupt.err;

  const ToolRun typo = bb_data("preprocess input=x tokenizer=y out=z worker=2", dir);
  EXPECT_EQ(typo.status, 1);
  EXPECT_NE(typo.err.find("unknown key 'worker'; did you mean 'workers'?"), std::string::npos) << typo.err;

  const ToolRun unknown = bb_data("frobnicate", dir);
  EXPECT_EQ(unknown.status, 1);
  EXPECT_NE(unknown.err.find("error: unknown command 'frobnicate'"), std::string::npos) << unknown.err;
}
