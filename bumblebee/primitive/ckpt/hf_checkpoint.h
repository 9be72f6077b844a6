// Hugging Face checkpoint folders: reading and writing the weights of a model
// directory as one model.safetensors or as shards listed by
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {name: file}}).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/primitive/ckpt/safetensors.h"

namespace bb {

// What open() takes from model.safetensors.index.json, validated: every weight_map
// entry maps a tensor to a plain file name inside the checkpoint folder.
struct HFCheckpointIndex {
  std::map<std::string, std::string> file_of;  // tensor name -> shard file
  std::string save_id;                         // metadata.bb_save_id; empty when absent
};
// Parses the index JSON `text`; `source` names it in errors.
HFCheckpointIndex parse_hf_checkpoint_index(const std::string& text, const std::string& source);

class HFCheckpoint {
 public:
  // Opens dir/model.safetensors when present (as transformers does), else the shards
  // named by dir/model.safetensors.index.json. Every shard is opened and validated;
  // a missing shard, an index entry whose shard lacks the tensor, a tensor stored in
  // two shards, or shards from a different save than the index are bb::Errors.
  static HFCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // every tensor in the shards, sorted
  bool has(const std::string& name) const;
  Tensor get(const std::string& name) const;  // host, stored dtype, zero copy where aligned
  // Drops the tensor's touched file pages from this process's resident set
  // (SafetensorsFile::drop_pages): loaders call it after each tensor.
  void drop_pages(const std::string& name) const;
  const Shape& shape(const std::string& name) const;
  DType dtype(const std::string& name) const;
  const std::string& shard_path(const std::string& name) const;

 private:
  const SafetensorsFile& shard(const std::string& name) const;

  std::string dir_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_;  // tensor name -> index into shards_
};

// HF's default shard limit (save_pretrained's max_shard_size="5GB").
constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ull;

// Writes `tensors` (any device) into `dir` (created if missing): model.safetensors
// when they fit in `max_shard_bytes`, else model-0000i-of-0000N.safetensors filled in
// the given order (a tensor larger than the limit gets a shard of its own) plus
// model.safetensors.index.json. Every file is written to a temporary name and renamed;
// the index is written after all shards, and files of an earlier checkpoint in `dir`
// that the new one does not use are removed last. Shards carry {"format": "pt"} as
// transformers requires, and a save id that open() matches against the index, so a
// save interrupted between shard renames is reported rather than mixing weights.
void save_hf_checkpoint(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace bb
