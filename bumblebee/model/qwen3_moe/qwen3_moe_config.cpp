// Parsing of HF Qwen3-MoE config.json into Qwen3MoeConfig.
#include "bumblebee/model/qwen3_moe/qwen3_moe_config.h"

#include <algorithm>

#include "bumblebee/core/edit_distance.h"
#include "bumblebee/core/error.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

namespace bb {

namespace {
int64_t positive_int(const nlohmann::json& j, const char* key) {
  BB_CHECK(j.contains(key) && j[key].is_number_integer(), "config.json: missing or non-integer '", key, "'");
  const int64_t v = j[key].get<int64_t>();
  BB_CHECK(v > 0, "config.json: '", key, "' must be positive, got ", v);
  return v;
}

const char* kMoeKeys[] = {"num_experts",          "num_experts_per_tok", "moe_intermediate_size",
                          "decoder_sparse_step",  "mlp_only_layers",     "norm_topk_prob",
                          "output_router_logits", "router_aux_loss_coef", "moe_aux_loss_type",
                          "router_z_loss_coef",   "moe_expert_capacity_factor", "moe_router_bias_update_rate"};
}  // namespace

bool Qwen3MoeConfig::is_moe_layer(int64_t layer) const {
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end() &&
         (layer + 1) % decoder_sparse_step == 0;
}

nlohmann::json Qwen3MoeConfig::to_json() const {
  nlohmann::json j = dense.to_json();
  j["num_experts"] = num_experts;
  j["num_experts_per_tok"] = num_experts_per_tok;
  j["moe_intermediate_size"] = moe_intermediate_size;
  j["decoder_sparse_step"] = decoder_sparse_step;
  j["mlp_only_layers"] = mlp_only_layers;
  j["norm_topk_prob"] = norm_topk_prob;
  j["output_router_logits"] = output_router_logits;
  j["router_aux_loss_coef"] = router_aux_loss_coef;
  j["moe_aux_loss_type"] = moe_aux_loss_type;
  j["router_z_loss_coef"] = router_z_loss_coef;
  j["moe_expert_capacity_factor"] = moe_expert_capacity_factor;
  j["moe_router_bias_update_rate"] = moe_router_bias_update_rate;
  return j;
}

Qwen3MoeConfig Qwen3MoeConfig::from_json(const nlohmann::json& j) {
  Qwen3MoeConfig c;
  nlohmann::json dense = j;
  for (const char* k : kMoeKeys) dense.erase(k);
  c.dense = DenseConfig::from_json(dense);
  c.num_experts = j.at("num_experts").get<int64_t>();
  c.num_experts_per_tok = j.at("num_experts_per_tok").get<int64_t>();
  c.moe_intermediate_size = j.at("moe_intermediate_size").get<int64_t>();
  c.decoder_sparse_step = j.at("decoder_sparse_step").get<int64_t>();
  c.mlp_only_layers = j.at("mlp_only_layers").get<std::vector<int64_t>>();
  c.norm_topk_prob = j.at("norm_topk_prob").get<bool>();
  c.output_router_logits = j.at("output_router_logits").get<bool>();
  c.router_aux_loss_coef = j.at("router_aux_loss_coef").get<double>();
  c.moe_aux_loss_type = j.at("moe_aux_loss_type").get<std::string>();
  c.router_z_loss_coef = j.at("router_z_loss_coef").get<double>();
  c.moe_expert_capacity_factor = j.at("moe_expert_capacity_factor").get<double>();
  c.moe_router_bias_update_rate = j.at("moe_router_bias_update_rate").get<double>();
  parse_aux_loss_type(c.moe_aux_loss_type);
  BB_CHECK(c.router_z_loss_coef >= 0, "qwen3_moe: router_z_loss_coef must be >= 0, got ", c.router_z_loss_coef);
  BB_CHECK(c.moe_expert_capacity_factor >= 0, "qwen3_moe: moe_expert_capacity_factor must be >= 0 (0: no drop), got ",
           c.moe_expert_capacity_factor);
  BB_CHECK(c.moe_router_bias_update_rate >= 0, "qwen3_moe: moe_router_bias_update_rate must be >= 0 (0: off), got ",
           c.moe_router_bias_update_rate);
  BB_CHECK(c.num_experts > 0, "qwen3_moe: num_experts must be positive, got ", c.num_experts);
  BB_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts, "qwen3_moe: num_experts_per_tok ",
           c.num_experts_per_tok, " must lie in [1, num_experts = ", c.num_experts, "]");
  BB_CHECK(c.moe_intermediate_size > 0, "qwen3_moe: moe_intermediate_size must be positive, got ",
           c.moe_intermediate_size);
  BB_CHECK(c.decoder_sparse_step >= 1, "qwen3_moe: decoder_sparse_step must be >= 1, got ", c.decoder_sparse_step);
  for (int64_t l : c.mlp_only_layers)
    BB_CHECK(l >= 0 && l < c.dense.num_layers, "qwen3_moe: mlp_only_layers names layer ", l, ", outside [0, ",
             c.dense.num_layers, ")");
  return c;
}

Qwen3MoeConfig parse_qwen3_moe_hf_config(const nlohmann::json& hf, const nlohmann::json& overrides) {
  nlohmann::json j = parse_dense_hf_config(hf, true, nlohmann::json::object()).to_json();
  if (hf.contains("num_experts") && !hf["num_experts"].is_null()) {
    j["num_experts"] = positive_int(hf, "num_experts");
  } else {
    BB_CHECK(hf.contains("num_local_experts"), "config.json: qwen3_moe needs 'num_experts' (or 'num_local_experts')");
    j["num_experts"] = positive_int(hf, "num_local_experts");
  }
  j["num_experts_per_tok"] = positive_int(hf, "num_experts_per_tok");
  j["moe_intermediate_size"] = positive_int(hf, "moe_intermediate_size");
  j["decoder_sparse_step"] = hf.contains("decoder_sparse_step") ? positive_int(hf, "decoder_sparse_step") : 1;
  j["mlp_only_layers"] = hf.value("mlp_only_layers", std::vector<int64_t>{});
  j["norm_topk_prob"] = hf.value("norm_topk_prob", false);
  j["output_router_logits"] = hf.value("output_router_logits", false);
  j["router_aux_loss_coef"] = hf.value("router_aux_loss_coef", 0.001);
  j["moe_aux_loss_type"] = "hf";
  j["router_z_loss_coef"] = 0.0;
  j["moe_expert_capacity_factor"] = 0.0;
  j["moe_router_bias_update_rate"] = 0.0;
  for (const auto& [k, v] : overrides.items()) {
    if (!j.contains(k)) {
      std::string nearest;
      size_t best = SIZE_MAX;
      for (const auto& [known, unused] : j.items())
        if (size_t d = edit_distance(k, known); d < best) best = d, nearest = known;
      BB_FAIL("unknown model config key '", k, "'; did you mean '", nearest, "'?");
    }
    j[k] = v;
  }
  return Qwen3MoeConfig::from_json(j);
}

}  // namespace bb
