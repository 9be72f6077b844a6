// open_input_file / read_input_file: every way a user's path can be wrong gives
// an error naming the path and what it was for; a good file reads back whole.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

class InputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bb_input_file_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// The message of the error `f` throws, or "" when it throws none.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(InputFile, BadPathsNameThePathAndWhatItIsFor) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  struct Row {
    std::string path, words;
  };
  const Row rows[] = {
      {"", "tokens file: no path given"},
      {path("missing.json"), "tokens file " + path("missing.json") + " does not exist"},
      {dir_.string(), "tokens file " + dir_.string() + " is a directory, not a file"},
      {path("fifo"), "tokens file " + path("fifo") + " is not a regular file"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.path);
    EXPECT_NE(error_of([&] { open_input_file(row.path, "tokens file"); }).find(row.words), std::string::npos)
        << error_of([&] { open_input_file(row.path, "tokens file"); });
    EXPECT_NE(error_of([&] { read_input_file(row.path, "tokens file"); }).find(row.words), std::string::npos);
  }
}

TEST_F(InputFile, ReadsAGoodFileWhole) {
  const std::string bytes("line 1\n\0line 2", 14);
  std::ofstream(path("ok.bin"), std::ios::binary) << bytes;
  EXPECT_EQ(read_input_file(path("ok.bin"), "data"), bytes);
  std::ofstream(path("empty"));
  EXPECT_EQ(read_input_file(path("empty"), "data"), "");
  std::ifstream in = open_input_file(path("ok.bin"), "data");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "line 1");
}

}  // namespace
}  // namespace bb
