// HFCheckpointWriter, and save_hf_checkpoint (hf_checkpoint.h) on top of it.
#include "bumblebee/primitive/ckpt/hf_checkpoint_writer.h"

#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint_names.h"

namespace bb {

namespace fs = std::filesystem;
using namespace hf_files;

HFCheckpointWriter::HFCheckpointWriter(std::string dir, uint64_t max_shard_bytes, std::optional<DType> dtype)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes), dtype_(dtype), save_id_(new_save_id()) {
  BB_CHECK(max_shard_bytes_ > 0, "HF checkpoint '", dir_, "': max_shard_bytes must be positive");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  BB_CHECK(fs::is_directory(dir_), "cannot create HF checkpoint folder '", dir_, "': ", ec.message());
}

// Shards are written under a part name and renamed once their count is known.
std::string HFCheckpointWriter::part_path(size_t i) const {
  return (fs::path(dir_) / ("model-part-" + std::to_string(i) + ".safetensors.tmp." + std::to_string(::getpid())))
      .string();
}

void HFCheckpointWriter::add(const std::string& name, const Tensor& t) {
  BB_CHECK(seen_.insert(name).second, "HF checkpoint '", dir_, "': tensor '", name, "' given twice");
  BB_CHECK(t.defined(), "HF checkpoint '", dir_, "': tensor '", name, "' is undefined");
  const Tensor out = dtype_ ? t.to(Device::cpu()).to(*dtype_) : t;
  const uint64_t n = out.nbytes();
  if (current_ && !current_->empty() && current_->data_bytes() + n > max_shard_bytes_) {
    current_->close();
    current_.reset();
  }
  if (!current_) {
    shard_names_.emplace_back();
    current_ = std::make_unique<SafetensorsStreamWriter>(
        part_path(shard_names_.size() - 1),
        std::map<std::string, std::string>{{"format", "pt"}, {kSaveIdKey, save_id_}});
  }
  current_->add(name, out);
  shard_names_.back().push_back(name);
  total_bytes_ += n;
}

uint64_t HFCheckpointWriter::finish() {
  if (!current_) {   // no tensor at all: an empty model.safetensors, as save_pretrained of an empty state
    shard_names_.emplace_back();
    current_ = std::make_unique<SafetensorsStreamWriter>(part_path(0), std::map<std::string, std::string>{
                                                                           {"format", "pt"}, {kSaveIdKey, save_id_}});
  }
  current_->close();
  current_.reset();
  const fs::path root(dir_);
  const size_t n = shard_names_.size();
  std::set<std::string> written;
  if (n == 1) {
    fs::rename(part_path(0), root / kSingleFile);
    written.insert(kSingleFile);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < n; ++i) {
      const std::string file = shard_name(i, n);
      fs::rename(part_path(i), root / file);
      for (const std::string& name : shard_names_[i]) weight_map[name] = file;
      written.insert(file);
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total_bytes_}, {kSaveIdKey, save_id_}}},
                                  {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    write_file_atomically((root / kIndexFile).string(), {{text.data(), text.size()}});
    written.insert(kIndexFile);
  }
  // Files of an earlier checkpoint would shadow or contradict the new one.
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string file = entry.path().filename().string();
    const bool ours = file == kSingleFile || file == kIndexFile || is_shard_name(file);
    if (ours && !written.count(file)) fs::remove(entry.path());
  }
  return total_bytes_;
}

void save_hf_checkpoint(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        uint64_t max_shard_bytes) {
  BB_CHECK(max_shard_bytes > 0, "save_hf_checkpoint '", dir, "': max_shard_bytes must be positive");
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors)
    BB_CHECK(seen.insert(name).second, "save_hf_checkpoint '", dir, "': tensor '", name, "' given twice");
  HFCheckpointWriter writer(dir, max_shard_bytes);
  for (const auto& [name, t] : tensors) writer.add(name, t);
  writer.finish();
}

}  // namespace bb
