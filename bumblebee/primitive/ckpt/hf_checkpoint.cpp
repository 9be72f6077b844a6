// Reading Hugging Face checkpoint folders (single or sharded safetensors); the writer is hf_checkpoint_writer.cpp.
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bumblebee/core/input_file.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint_names.h"

namespace bb {

namespace fs = std::filesystem;
using json = nlohmann::json;

using namespace hf_files;

HFCheckpointIndex parse_hf_checkpoint_index(const std::string& text, const std::string& source) {
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    BB_FAIL("HF checkpoint index '", source, "': not valid JSON: ", e.what());
  }
  BB_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
           "HF checkpoint index '", source, "': expected an object with a \"weight_map\" object");
  HFCheckpointIndex out;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    BB_CHECK(it.value().is_string(), "HF checkpoint index '", source, "': tensor '", it.key(), "' maps to ",
             it.value().dump(), ", expected a file name");
    const std::string file = it.value().get<std::string>();
    // The index comes from outside: it must not reach files beyond the checkpoint folder.
    BB_CHECK(!file.empty() && fs::path(file).filename() == file && file != "." && file != "..",
             "HF checkpoint index '", source, "': tensor '", it.key(), "' maps to '", file,
             "', which is not a plain file name in the checkpoint folder");
    out.file_of[it.key()] = file;
  }
  if (index.contains("metadata") && index["metadata"].is_object() && index["metadata"].contains(kSaveIdKey) &&
      index["metadata"][kSaveIdKey].is_string())
    out.save_id = index["metadata"][kSaveIdKey].get<std::string>();
  return out;
}

HFCheckpoint HFCheckpoint::open(const std::string& dir) {
  HFCheckpoint ck;
  ck.dir_ = dir;
  BB_CHECK(fs::is_directory(dir), "HF checkpoint '", dir, "': not a directory");
  const fs::path single = fs::path(dir) / kSingleFile;
  const fs::path index_path = fs::path(dir) / kIndexFile;

  if (fs::exists(single)) {
    ck.shards_.push_back(SafetensorsFile::open(single.string()));
    for (const std::string& name : ck.shards_[0].names()) ck.shard_of_[name] = 0;
    return ck;
  }
  BB_CHECK(fs::exists(index_path), "HF checkpoint '", dir, "': found neither ", kSingleFile, " nor ", kIndexFile,
           " (only safetensors checkpoints are supported)");

  const HFCheckpointIndex index =
      parse_hf_checkpoint_index(read_input_file(index_path.string(), "HF checkpoint index"), index_path.string());
  std::map<std::string, size_t> shard_by_file;
  for (const auto& [name, file] : index.file_of) {
    if (shard_by_file.count(file)) continue;
    const fs::path shard_path = fs::path(dir) / file;
    BB_CHECK(fs::exists(shard_path), "HF checkpoint index '", index_path.string(), "': tensor '", name,
             "' is in shard '", file, "', which does not exist");
    shard_by_file[file] = ck.shards_.size();
    ck.shards_.push_back(SafetensorsFile::open(shard_path.string()));
  }

  const std::string& save_id = index.save_id;
  for (size_t s = 0; s < ck.shards_.size(); ++s) {
    const SafetensorsFile& shard = ck.shards_[s];
    if (!save_id.empty()) {
      auto it = shard.metadata().find(kSaveIdKey);
      BB_CHECK(it != shard.metadata().end() && it->second == save_id, "HF checkpoint '", dir, "': shard '",
               shard.path(), "' was not written by the same save as ", kIndexFile,
               " (an interrupted save?); save the checkpoint again");
    }
    for (const std::string& name : shard.names()) {
      auto [it, inserted] = ck.shard_of_.emplace(name, s);
      BB_CHECK(inserted, "HF checkpoint '", dir, "': tensor '", name, "' is stored in both '",
               ck.shards_[it->second].path(), "' and '", shard.path(), "'");
    }
  }
  for (const auto& [name, file] : index.file_of) {
    const SafetensorsFile& shard = ck.shards_[shard_by_file.at(file)];
    BB_CHECK(shard.has(name), "HF checkpoint index '", index_path.string(), "': tensor '", name,
             "' is mapped to shard '", file, "', which does not contain it");
  }
  return ck;
}

std::vector<std::string> HFCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(shard_of_.size());
  for (const auto& kv : shard_of_) out.push_back(kv.first);
  return out;
}

bool HFCheckpoint::has(const std::string& name) const { return shard_of_.count(name) != 0; }

const SafetensorsFile& HFCheckpoint::shard(const std::string& name) const {
  auto it = shard_of_.find(name);
  BB_CHECK(it != shard_of_.end(), "HF checkpoint '", dir_, "' has no tensor '", name, "'");
  return shards_[it->second];
}

Tensor HFCheckpoint::get(const std::string& name) const { return shard(name).get(name); }
void HFCheckpoint::drop_pages(const std::string& name) const { shard(name).drop_pages(name); }
const Shape& HFCheckpoint::shape(const std::string& name) const { return shard(name).shape(name); }
DType HFCheckpoint::dtype(const std::string& name) const { return shard(name).dtype(name); }
const std::string& HFCheckpoint::shard_path(const std::string& name) const { return shard(name).path(); }

}  // namespace bb
