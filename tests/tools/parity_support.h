// Shared pieces of the parallel-parity tests (tp x dp, ep): relative error and
// a tokens file of random ids for bb-correctness.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/core/rng.h"

namespace bb::test {

inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

// `rows` sequences of `len` ids below `vocab`, drawn from `seed`, in a
// temporary file named after `name` and this process.
inline std::string random_tokens_file(const std::string& name, uint64_t seed, int rows, int len, int vocab) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".json")).string();
  Generator gen(seed);
  nlohmann::json j = nlohmann::json::array();
  for (int s = 0; s < rows; ++s) {
    nlohmann::json row = nlohmann::json::array();
    for (int t = 0; t < len; ++t) row.push_back(int(gen.next_u64() % uint64_t(vocab)));
    j.push_back(row);
  }
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace bb::test
