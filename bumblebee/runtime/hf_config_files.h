// The non-weight files of an HF model folder that bumblebee writes: the
// model's config.json and the side files of the source folder (generation
// config, tokenizer), shared by the HF export and training checkpoints.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace bb {

// Writes `hf_config` as dir/config.json (renamed into place) and copies the
// side files present in `hf_path` (none when it is empty or is `dir`) into
// `dir`, which exists. Called by one rank.
void write_hf_config_files(const nlohmann::json& hf_config, const std::string& hf_path, const std::string& dir);

}  // namespace bb
