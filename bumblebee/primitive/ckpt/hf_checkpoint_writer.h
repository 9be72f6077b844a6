// HFCheckpointWriter: writes a Hugging Face checkpoint folder as a stream of
// tensors, one at a time, so exporting a model of any size needs host memory
// for one tensor (plus the caller's bucket), never the whole model.
//
// Tensors fill shards in the order given; a shard is closed when the next
// tensor would take it past max_shard_bytes (a larger tensor gets a shard of
// its own), as save_pretrained does. finish() names the shards
// model-0000i-of-0000N.safetensors (or model.safetensors when there is one),
// writes model.safetensors.index.json last and removes files of an earlier
// checkpoint in the folder that the new one does not use. Each shard carries
// {"format": "pt"} and a save id that HFCheckpoint::open matches against the
// index, so a save interrupted between renames is reported, not mixed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/primitive/ckpt/safetensors.h"

namespace bb {

class HFCheckpointWriter {
 public:
  // `dtype`: every tensor is cast to it; empty: each is written in its own dtype.
  HFCheckpointWriter(std::string dir, uint64_t max_shard_bytes, std::optional<DType> dtype = std::nullopt);
  void add(const std::string& name, const Tensor& t);
  // Closes the last shard and publishes the checkpoint; returns the bytes of tensor data written.
  uint64_t finish();

 private:
  std::string part_path(size_t i) const;

  std::string dir_;
  uint64_t max_shard_bytes_;
  std::optional<DType> dtype_;
  std::string save_id_;
  std::unique_ptr<SafetensorsStreamWriter> current_;
  std::vector<std::vector<std::string>> shard_names_;   // the tensors of each shard, in order
  std::set<std::string> seen_;
  uint64_t total_bytes_ = 0;
};

}  // namespace bb
