// ByteLevelBpe: the BPE model of a byte-level tokenizer.json (vocab + ranked merges).
//
// A pre-tokenized word (raw bytes) starts as one symbol per byte, spelled in
// the byte-level alphabet; the adjacent pair with the lowest merge rank is
// merged until no ranked pair is left (ties go to the leftmost pair). With
// ignore_merges (Llama 3), a word that is itself a vocabulary entry maps to
// that id directly. Results of short words are cached: the same words recur
// constantly in real text.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bb {

class ByteLevelBpe {
 public:
  // `vocab` maps token strings (byte-level alphabet) to ids; `merges` lists
  // pairs by rank. Errors name `source` (the tokenizer.json path).
  ByteLevelBpe(std::unordered_map<std::string, int32_t> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
               const std::string& source);

  // Appends the ids of one pre-tokenized word (raw bytes) to `out`. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  size_t num_merges() const { return merge_of_pair_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merge_of_pair_;
  int32_t byte_ids_[256];
  bool ignore_merges_;

  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace bb
