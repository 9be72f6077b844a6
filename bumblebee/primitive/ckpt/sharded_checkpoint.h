// Distributed (sharded) checkpoints: every rank writes the pieces of the
// tensors it holds, nobody gathers a tensor, and a load at any layout reads
// each rank's boxes back from whichever saved pieces cover them.
//
// A folder holds
//   rank-0000R.safetensors   rank R's pieces (none when it owns none), each a
//                            tensor named "<key>@<offsets>" of the box's shape
//   metadata.json            {"format": "bumblebee-sharded-1",
//                             "files":   {file: {"bytes": N, "crc32c": C}},
//                             "tensors": {key: {"shape": [..], "dtype": "float32",
//                                               "shards": [{"file": f, "name": n,
//                                                           "offsets": [..], "extent": [..]}]}}}
// A save is collective over the world: each rank first records the pieces it
// holds (plan-0000R.json); after a barrier a piece that several ranks hold
// (dp replicas, a tp-replicated norm) is written by the lowest rank holding
// it, so the pieces of a tensor never overlap; after a second barrier rank 0
// merges the plans into metadata.json with every file's size and CRC-32C
// (core/crc32c.h) and removes the plans. A load maps only the files its
// boxes need, verifies each one's size and checksum the first time it reads
// it, and copies only the byte ranges of the intersecting pieces.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/core/crc32c.h"
#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/ckpt/safetensors.h"
#include "bumblebee/primitive/ckpt/tensor_box.h"

namespace bb {

inline constexpr const char* kShardedMetadataFile = "metadata.json";

// A box of a global tensor that this rank holds: `data` has the box's
// elements in row-major order (any device, any shape of that numel).
struct TensorPiece {
  std::string key;      // the global tensor, e.g. "exp_avg/model.norm.weight"
  Shape global_shape;
  TensorBox box;
  Tensor data;
};

// Writes `pieces` into `dir` (which must exist). Collective over `world`;
// rank 0 has written metadata.json when it returns (the caller's barrier
// publishes it to the others).
void save_sharded_tensors(const std::string& dir, const std::vector<TensorPiece>& pieces,
                          dist::Communicator& world);

class ShardedCheckpoint {
 public:
  // Reads and validates dir/metadata.json: every tensor's pieces lie inside
  // its shape, do not overlap and cover it exactly, and name files the
  // metadata lists. Maps no tensor file yet.
  static ShardedCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> keys() const;   // sorted
  bool has(const std::string& key) const;
  const Shape& shape(const std::string& key) const;
  DType dtype(const std::string& key) const;
  // The files and their sizes as the metadata lists them.
  const std::map<std::string, FileChecksum>& files() const { return files_; }

  // Fills `out` (box.numel() elements, any device and dtype: cast once) with
  // `box` of tensor `key`, from the saved pieces that intersect it.
  void read(const std::string& key, const TensorBox& box, Tensor& out);

 private:
  struct Piece {
    std::string file, name;
    TensorBox box;
  };
  struct Entry {
    Shape shape;
    DType dtype = DType::F32;
    std::vector<Piece> pieces;
  };
  const Entry& entry(const std::string& key) const;
  const SafetensorsFile& file(const std::string& name);

  std::string dir_;
  std::map<std::string, FileChecksum> files_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, SafetensorsFile> opened_;   // verified and mapped on first use
};

// Validates a metadata.json image (as open() does); `source` names it in errors.
void check_sharded_metadata(const nlohmann::json& metadata, const std::string& source);

}  // namespace bb
