// Reading and writing Hugging Face checkpoint folders (single or sharded safetensors).
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bumblebee/core/input_file.h"

namespace bb {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
// Ties the shards of one save to its index; see save_hf_checkpoint.
constexpr const char* kSaveIdKey = "bb_save_id";
const std::regex kShardName(R"(model-\d{5}-of-\d{5}\.safetensors)");

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

std::string new_save_id() {
  std::random_device rd;
  std::ostringstream os;
  os << std::hex << rd() << rd();
  return os.str();
}

}  // namespace

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
const Shape& HFCheckpoint::shape(const std::string& name) const { return shard(name).shape(name); }
DType HFCheckpoint::dtype(const std::string& name) const { return shard(name).dtype(name); }
const std::string& HFCheckpoint::shard_path(const std::string& name) const { return shard(name).path(); }

void save_hf_checkpoint(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        uint64_t max_shard_bytes) {
  BB_CHECK(max_shard_bytes > 0, "save_hf_checkpoint '", dir, "': max_shard_bytes must be positive");
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors)
    BB_CHECK(seen.insert(name).second, "save_hf_checkpoint '", dir, "': tensor '", name, "' given twice");

  using Shard = std::vector<std::pair<std::string, Tensor>>;
  std::vector<Shard> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t n = t.defined() ? t.nbytes() : 0;
    if (!shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, t);
    shard_bytes += n;
    total_bytes += n;
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  BB_CHECK(fs::is_directory(dir), "save_hf_checkpoint: cannot create folder '", dir, "': ", ec.message());
  const fs::path root(dir);
  std::set<std::string> written;
  if (shards.size() == 1) {
    write_safetensors((root / kSingleFile).string(), shards[0], {{"format", "pt"}});
    written.insert(kSingleFile);
  } else {
    const std::string save_id = new_save_id();
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file = shard_name(i, shards.size());
      write_safetensors((root / file).string(), shards[i], {{"format", "pt"}, {kSaveIdKey, save_id}});
      for (const auto& kv : shards[i]) weight_map[kv.first] = file;
      written.insert(file);
    }
    const json index = {{"metadata", {{"total_size", total_bytes}, {kSaveIdKey, save_id}}},
                        {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    write_file_atomically((root / kIndexFile).string(), {{text.data(), text.size()}});
    written.insert(kIndexFile);
  }

  // Files of an earlier checkpoint would shadow or contradict the new one.
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string file = entry.path().filename().string();
    const bool ours = file == kSingleFile || file == kIndexFile || std::regex_match(file, kShardName);
    if (ours && !written.count(file)) fs::remove(entry.path());
  }
}

}  // namespace bb
