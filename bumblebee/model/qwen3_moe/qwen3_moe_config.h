// Config of Qwen3-MoE (HF model_type "qwen3_moe"), parsed from config.json:
// the dense decoder's fields (DenseConfig: attention, norms, rope in the
// transformers 4 or 5 spelling) plus the mixture of experts.
//
// Both spellings of the expert count are read (`num_experts`, Qwen3-MoE;
// `num_local_experts`, Mixtral's), and HF's class defaults apply to absent
// keys (norm_topk_prob false, router_aux_loss_coef 0.001,
// output_router_logits false, decoder_sparse_step 1, mlp_only_layers []).
// Layer i is a MoE layer, by HF's rule, when it is not in mlp_only_layers
// and (i + 1) % decoder_sparse_step == 0; the others have the dense SwiGLU
// MLP of intermediate_size.
//
// Beyond HF's keys (set through backend.model_overrides): moe_aux_loss_type
// ("hf": HF's loss over all layers, the default; "megatron": Megatron's
// per-layer loss), router_z_loss_coef (0: no z-loss),
// moe_expert_capacity_factor (0: no token is dropped) and
// moe_router_bias_update_rate (0: off; > 0: auxiliary-loss-free balancing
// with an expert bias per MoE layer, expert_bias_update.h). See docs/models.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/model/dense/dense_config.h"

namespace bb {

struct Qwen3MoeConfig {
  DenseConfig dense;
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0, decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool norm_topk_prob = false, output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  std::string moe_aux_loss_type = "hf";
  double router_z_loss_coef = 0.0, moe_expert_capacity_factor = 0.0, moe_router_bias_update_rate = 0.0;

  bool is_moe_layer(int64_t layer) const;
  nlohmann::json to_json() const;
  static Qwen3MoeConfig from_json(const nlohmann::json& j);   // the normalised form
};

// HF config.json -> Qwen3MoeConfig, then `overrides` (normalised key names);
// an unknown override key is an error naming the nearest.
Qwen3MoeConfig parse_qwen3_moe_hf_config(const nlohmann::json& hf, const nlohmann::json& overrides);

}  // namespace bb
