// Helpers shared by the checkpoint tests: a per-test temporary folder, raw
// safetensors files built byte by byte, and error-message expectations.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bumblebee/core/error.h"

namespace bb::testing {

// A fresh folder per test, removed afterwards; the name includes the pid so
// concurrent test runs do not collide.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("bb_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// Writes a safetensors file by hand: the 8-byte length (the header's size unless
// `header_len` overrides it), the header text, then `data`.
inline void write_raw(const std::string& path, const std::string& header, const std::string& data,
                      std::optional<uint64_t> header_len = std::nullopt) {
  uint64_t len = header_len.value_or(header.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Runs `f`, expecting a bb::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message '" << e.what() << "' lacks '" << p << "'";
    return;
  }
  ADD_FAILURE() << "no bb::Error thrown";
}

}  // namespace bb::testing
