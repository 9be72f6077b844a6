// Config of the dense decoder family (Llama 3, Qwen3): parsed from HF config.json.
//
// Both transformers spellings are read: v4 (top-level rope_theta, rope_scaling)
// and v5 (rope_parameters). head_dim is taken when present, else hidden/heads.
// Features this implementation does not have (attention or MLP bias, other
// activations, sliding windows) are rejected by name rather than ignored.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/modules/rope.h"

namespace bb {

struct DenseConfig {
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, initializer_range = 0.02;
  bool tie_word_embeddings = false, qk_norm = false;
  RopeConfig rope;

  nlohmann::json to_json() const;
  static DenseConfig from_json(const nlohmann::json& j);   // the normalised form above
};

// HF config.json -> DenseConfig, then `overrides` (normalised key names, e.g.
// {"num_layers": 2}); an unknown override key is an error naming the nearest.
DenseConfig parse_dense_hf_config(const nlohmann::json& hf, bool qk_norm, const nlohmann::json& overrides);

}  // namespace bb
