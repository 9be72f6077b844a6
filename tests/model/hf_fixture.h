// Access to the committed HF transformers fixtures (tests/fixtures/<name>/):
// reference numbers, tokens and float64 logits made by make_hf_fixtures.py.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/runtime/packed_batch.h"

namespace bb::test {

inline std::string fixture_dir(const std::string& name) { return std::string(BB_SOURCE_DIR) + "/tests/fixtures/" + name; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// The fixture's tokens as one packed batch of B sequences.
inline PackedBatch fixture_batch(const std::string& name) {
  PackedBatch b;
  for (const auto& row : read_json(fixture_dir(name) + "/tokens.json")) {
    for (const auto& id : row) b.input_ids.push_back(id.get<int64_t>());
    b.seq_lens.push_back(int64_t(row.size()));
  }
  return b;
}

// The name a parameter's gradient norm has in the fixture: its own, or for
// experts stored fused (transformers 5's save_original_format=False) the
// fused tensor that holds it (mlp.experts.gate_up_proj / mlp.experts.down_proj).
inline std::string checkpoint_name(const std::string& param, const nlohmann::json& per_param) {
  if (per_param.contains(param)) return param;
  const size_t at = param.find(".mlp.experts.");
  if (at == std::string::npos) return param;
  const std::string experts = param.substr(0, at) + ".mlp.experts.";
  if (param.find("down_proj") != std::string::npos) return experts + "down_proj";
  return experts + "gate_up_proj";
}

inline std::vector<double> fixture_logits(const std::string& name) {
  std::ifstream f(fixture_dir(name) + "/logits_f64.bin", std::ios::binary);
  std::vector<double> v;
  double x;
  while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  return v;
}

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> n = {"qwen3_gqa",       "qwen3_mha_sharded", "qwen3_tp",
                                             "llama3_gqa",      "llama3_tied_f16",   "qwen3_moe_experts",
                                             "qwen3_moe_fused", "qwen3_moe_mixed",   "deepseek_v3_mla",
                                             "deepseek_v3_qproj", "deepseek_v3_mtp"};
  return n;
}

}  // namespace bb::test
