// The tool tests' scratch directory: one a test process, under the system
// temp directory, removed with everything in it when the process exits, so
// that MPI session directories and token files do not pile up in /tmp.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace bb::test {

inline const std::filesystem::path& process_scratch_dir() {
  struct Scratch {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("bb_test_" + std::to_string(::getpid()));
    Scratch() { std::filesystem::create_directories(path); }
    ~Scratch() {
      std::error_code ec;  // a failed clean-up must not fail the run
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

}  // namespace bb::test
