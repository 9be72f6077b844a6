// Config of DeepSeek-V3 (HF model_type "deepseek_v3", transformers'
// DeepseekV3Config), parsed from config.json: multi-head latent attention
// (q_lora_rank, absent or null for q_proj; kv_lora_rank; qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim; rope_interleave), rope with yarn scaling
// (rope_scaling: factor, original_max_position_embeddings, beta_fast,
// beta_slow, mscale, mscale_all_dim), the mixture of experts
// (n_routed_experts, num_experts_per_tok, moe_intermediate_size,
// n_shared_experts, first_k_dense_replace, n_group, topk_group,
// routed_scaling_factor, norm_topk_prob; sigmoid scoring) and
// num_nextn_predict_layers (multi-token prediction depths, read from
// num_mtp_layers under transformers 5; absent: 0) with
// mtp_loss_scaling_factor (not an HF key: the MTP loss weight, Megatron's
// name and default 0.1). Absent keys take HF's class defaults. Every field out
// of range is an error naming it.
#pragma once

#include <nlohmann/json.hpp>

#include "bumblebee/model/dense/dense_config.h"

namespace bb {

struct DeepseekV3Config {
  DenseConfig dense;   // vocab, hidden, intermediate (dense layers), layers, heads, norms, rope theta
  int64_t q_lora_rank = 0;   // 0: q_proj
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;
  int64_t n_routed_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0, n_shared_experts = 0;
  int64_t first_k_dense_replace = 0, n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  int64_t num_nextn_predict_layers = 0;
  double mtp_loss_scaling_factor = 0.1;

  bool is_moe_layer(int64_t layer) const { return layer >= first_k_dense_replace; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // HF's scaling: qk_head_dim^-1/2, times yarn_get_mscale(factor, mscale_all_dim)^2 under yarn.
  double softmax_scale() const;
  nlohmann::json to_json() const;
  static DeepseekV3Config from_json(const nlohmann::json& j);   // the normalised form; validates
};

// HF config.json -> DeepseekV3Config, then `overrides` (normalised key names);
// an unknown override key is an error naming the nearest.
DeepseekV3Config parse_deepseek_v3_hf_config(const nlohmann::json& hf, const nlohmann::json& overrides);

}  // namespace bb
