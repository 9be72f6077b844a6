// keep_metrics_through: metrics.jsonl cut back to a resumed step, one row per input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bumblebee/core/error.h"
#include "bumblebee/train/metrics_history.h"

namespace {

namespace fs = std::filesystem;

struct Row {
  const char* name;
  std::string text;       // the file before; "<none>": no file
  int64_t last_step;
  std::string kept;       // the file after (an error: the words it must hold)
  bool error = false;
};

TEST(MetricsHistory, KeepsTheStepsUpToTheCheckpoint) {
  const std::string a = R"({"type":"train","step":1,"loss":2.5})", b = R"({"type":"valid","step":1,"loss":2.4})",
                    c = R"({"type":"train","step":2,"loss":2.0})", d = R"({"type":"train","step":3,"loss":null})";
  const std::vector<Row> rows = {
      {"all kept", a + "\n" + b + "\n" + c + "\n", 2, a + "\n" + b + "\n" + c + "\n"},
      {"later steps dropped", a + "\n" + b + "\n" + c + "\n" + d + "\n", 1, a + "\n" + b + "\n"},
      {"a half-written last line dropped", a + "\n" + c + "\n" + R"({"type":"tr)", 5, a + "\n" + c + "\n"},
      {"null loss kept", a + "\n" + d + "\n", 3, a + "\n" + d + "\n"},
      {"no file", "<none>", 3, ""},
      {"a broken line in the middle", a + "\n{oops\n" + c + "\n", 3, "line 2 is not JSON", true},
      {"a record without a step", a + "\n" + R"({"type":"train"})" + "\n", 3, "line 2 has no integer \"step\"", true},
  };
  const std::string path = ::testing::TempDir() + "/bb_metrics_history_" + std::to_string(::getpid()) + ".jsonl";
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    fs::remove(path);
    if (row.text != "<none>") std::ofstream(path, std::ios::binary) << row.text;
    if (row.error) {
      try {
        bb::train::keep_metrics_through(path, row.last_step);
        ADD_FAILURE() << "no error";
      } catch (const bb::Error& e) {
        EXPECT_NE(std::string(e.what()).find(row.kept), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      }
      continue;
    }
    const std::vector<nlohmann::json> kept = bb::train::keep_metrics_through(path, row.last_step);
    std::ifstream f(path, std::ios::binary);
    const std::string after(std::istreambuf_iterator<char>(f), {});
    EXPECT_EQ(after, row.kept);
    EXPECT_EQ(int64_t(kept.size()), std::count(row.kept.begin(), row.kept.end(), '\n'));
  }
  fs::remove(path);
}

}  // namespace
