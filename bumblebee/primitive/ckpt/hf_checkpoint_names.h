// The file names of an HF checkpoint folder, shared by its reader
// (hf_checkpoint.cpp) and its writer (hf_checkpoint_writer.cpp).
#pragma once

#include <cstdio>
#include <random>
#include <regex>
#include <sstream>
#include <string>

namespace bb::hf_files {

inline constexpr const char* kSingleFile = "model.safetensors";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";
// Ties the shards of one save to its index; see HFCheckpointWriter.
inline constexpr const char* kSaveIdKey = "bb_save_id";
inline const std::regex kShardName(R"(model-\d{5}-of-\d{5}\.safetensors)");

inline std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

inline std::string new_save_id() {
  std::random_device rd;
  std::ostringstream os;
  os << std::hex << rd() << rd();
  return os.str();
}

}  // namespace bb::hf_files
