// The file names of an HF checkpoint folder, shared by its reader
// (hf_checkpoint.cpp) and its writer (hf_checkpoint_writer.cpp).
#pragma once

#include <cctype>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <string_view>

namespace bb::hf_files {

inline constexpr const char* kSingleFile = "model.safetensors";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";
// Ties the shards of one save to its index; see HFCheckpointWriter.
inline constexpr const char* kSaveIdKey = "bb_save_id";

// Whether `file` is a shard name shard_name() writes: model-NNNNN-of-NNNNN.safetensors.
// Matched by hand, not by a std::regex: a regex compiled while a shared
// library loads (a namespace-scope constant) crashed libbumblebee.so's static
// initialisation in a Python process that had imported numpy first (H200
// machine; benchmarks/RESULTS.md).
inline bool is_shard_name(std::string_view file) {
  const std::string_view head = "model-", mid = "-of-", tail = ".safetensors";
  if (file.size() != head.size() + 5 + mid.size() + 5 + tail.size()) return false;
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i)
      if (!std::isdigit(static_cast<unsigned char>(file[i]))) return false;
    return true;
  };
  const size_t a = head.size(), b = a + 5 + mid.size();
  return file.starts_with(head) && digits(a) && file.substr(a + 5, mid.size()) == mid && digits(b) &&
         file.ends_with(tail);
}

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
