// Parsing and validation of HF DeepSeek-V3 config.json into DeepseekV3Config.
#include "bumblebee/model/deepseek_v3/deepseek_v3_config.h"

#include <cmath>

#include "bumblebee/core/edit_distance.h"
#include "bumblebee/core/error.h"

namespace bb {

namespace {
using json = nlohmann::json;

const char* kKeys[] = {"q_lora_rank",           "kv_lora_rank",       "qk_nope_head_dim",
                       "qk_rope_head_dim",      "v_head_dim",         "rope_interleave",
                       "n_routed_experts",      "num_experts_per_tok", "moe_intermediate_size",
                       "n_shared_experts",      "first_k_dense_replace", "n_group",
                       "topk_group",            "routed_scaling_factor", "norm_topk_prob",
                       "num_nextn_predict_layers", "rope_beta_fast",  "rope_beta_slow",
                       "rope_mscale",           "rope_mscale_all_dim", "mtp_loss_scaling_factor"};

int64_t int_or(const json& hf, const char* key, int64_t fallback) {
  if (!hf.contains(key) || hf[key].is_null()) return fallback;
  BB_CHECK(hf[key].is_number_integer(), "config.json: '", key, "' must be an integer, got ", hf[key].dump());
  return hf[key].get<int64_t>();
}

// The yarn block of rope_scaling (transformers 4) or rope_parameters (5).
void read_yarn(const json& hf, json& j) {
  const json* block = nullptr;
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (hf.contains(k) && hf[k].is_object()) block = &hf[k];
  j["rope_beta_fast"] = 32.0;
  j["rope_beta_slow"] = 1.0;
  j["rope_mscale"] = 0.0;
  j["rope_mscale_all_dim"] = 0.0;
  if (!block) return;
  const std::string type = block->value("rope_type", block->value("type", std::string("default")));
  if (type != "yarn") return;
  auto real = [&](const char* k, double fallback) {
    if (!block->contains(k) || (*block)[k].is_null()) return fallback;
    BB_CHECK((*block)[k].is_number(), "config.json: 'rope_scaling.", k, "' must be a number, got ",
             (*block)[k].dump());
    return (*block)[k].get<double>();
  };
  j["rope_type"] = "yarn";
  j["rope_factor"] = real("factor", 1.0);
  j["rope_original_max_position_embeddings"] =
      int64_t(real("original_max_position_embeddings", double(hf.value("max_position_embeddings", 4096))));
  j["rope_beta_fast"] = real("beta_fast", 32.0);
  j["rope_beta_slow"] = real("beta_slow", 1.0);
  j["rope_mscale"] = real("mscale", 0.0);
  j["rope_mscale_all_dim"] = real("mscale_all_dim", 0.0);
}
}  // namespace

double DeepseekV3Config::softmax_scale() const {
  double s = 1.0 / std::sqrt(double(qk_head_dim()));
  if (dense.rope.type == "yarn" && dense.rope.mscale_all_dim != 0) {
    const double m = yarn_get_mscale(dense.rope.factor, dense.rope.mscale_all_dim);
    s *= m * m;
  }
  return s;
}

json DeepseekV3Config::to_json() const {
  json j = dense.to_json();
  j["q_lora_rank"] = q_lora_rank;
  j["kv_lora_rank"] = kv_lora_rank;
  j["qk_nope_head_dim"] = qk_nope_head_dim;
  j["qk_rope_head_dim"] = qk_rope_head_dim;
  j["v_head_dim"] = v_head_dim;
  j["rope_interleave"] = rope_interleave;
  j["n_routed_experts"] = n_routed_experts;
  j["num_experts_per_tok"] = num_experts_per_tok;
  j["moe_intermediate_size"] = moe_intermediate_size;
  j["n_shared_experts"] = n_shared_experts;
  j["first_k_dense_replace"] = first_k_dense_replace;
  j["n_group"] = n_group;
  j["topk_group"] = topk_group;
  j["routed_scaling_factor"] = routed_scaling_factor;
  j["norm_topk_prob"] = norm_topk_prob;
  j["num_nextn_predict_layers"] = num_nextn_predict_layers;
  j["mtp_loss_scaling_factor"] = mtp_loss_scaling_factor;
  j["rope_beta_fast"] = dense.rope.beta_fast;
  j["rope_beta_slow"] = dense.rope.beta_slow;
  j["rope_mscale"] = dense.rope.mscale;
  j["rope_mscale_all_dim"] = dense.rope.mscale_all_dim;
  return j;
}

DeepseekV3Config DeepseekV3Config::from_json(const json& j) {
  DeepseekV3Config c;
  json dense = j;
  for (const char* k : kKeys) dense.erase(k);
  const std::string rope_type = dense.at("rope_type").get<std::string>();
  dense["rope_type"] = "default";   // DenseConfig knows no yarn; the fields are kept here
  c.dense = DenseConfig::from_json(dense);
  c.dense.rope.type = rope_type;
  c.dense.rope.beta_fast = j.at("rope_beta_fast").get<double>();
  c.dense.rope.beta_slow = j.at("rope_beta_slow").get<double>();
  c.dense.rope.mscale = j.at("rope_mscale").get<double>();
  c.dense.rope.mscale_all_dim = j.at("rope_mscale_all_dim").get<double>();
  for (auto [field, key] : {std::pair{&c.q_lora_rank, "q_lora_rank"}, {&c.kv_lora_rank, "kv_lora_rank"},
                            {&c.qk_nope_head_dim, "qk_nope_head_dim"}, {&c.qk_rope_head_dim, "qk_rope_head_dim"},
                            {&c.v_head_dim, "v_head_dim"}, {&c.n_routed_experts, "n_routed_experts"},
                            {&c.num_experts_per_tok, "num_experts_per_tok"},
                            {&c.moe_intermediate_size, "moe_intermediate_size"},
                            {&c.n_shared_experts, "n_shared_experts"},
                            {&c.first_k_dense_replace, "first_k_dense_replace"}, {&c.n_group, "n_group"},
                            {&c.topk_group, "topk_group"}, {&c.num_nextn_predict_layers, "num_nextn_predict_layers"}})
    *field = j.at(key).get<int64_t>();
  c.rope_interleave = j.at("rope_interleave").get<bool>();
  c.routed_scaling_factor = j.at("routed_scaling_factor").get<double>();
  c.norm_topk_prob = j.at("norm_topk_prob").get<bool>();
  c.mtp_loss_scaling_factor = j.at("mtp_loss_scaling_factor").get<double>();

  BB_CHECK(c.q_lora_rank >= 0, "deepseek_v3: q_lora_rank must be > 0 (or null for q_proj), got ", c.q_lora_rank);
  BB_CHECK(c.kv_lora_rank > 0, "deepseek_v3: kv_lora_rank must be > 0, got ", c.kv_lora_rank);
  BB_CHECK(c.qk_nope_head_dim > 0, "deepseek_v3: qk_nope_head_dim must be > 0, got ", c.qk_nope_head_dim);
  BB_CHECK(c.qk_rope_head_dim > 0 && c.qk_rope_head_dim % 2 == 0,
           "deepseek_v3: qk_rope_head_dim must be even and > 0 (rotary pairs), got ", c.qk_rope_head_dim);
  BB_CHECK(c.v_head_dim > 0, "deepseek_v3: v_head_dim must be > 0, got ", c.v_head_dim);
  BB_CHECK(c.n_routed_experts > 0, "deepseek_v3: n_routed_experts must be > 0, got ", c.n_routed_experts);
  BB_CHECK(c.moe_intermediate_size > 0, "deepseek_v3: moe_intermediate_size must be > 0, got ",
           c.moe_intermediate_size);
  BB_CHECK(c.n_shared_experts >= 0, "deepseek_v3: n_shared_experts must be >= 0, got ", c.n_shared_experts);
  BB_CHECK(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.dense.num_layers,
           "deepseek_v3: first_k_dense_replace ", c.first_k_dense_replace, " must lie in [0, num_hidden_layers = ",
           c.dense.num_layers, "]");
  BB_CHECK(c.n_group >= 1, "deepseek_v3: n_group must be >= 1, got ", c.n_group);
  BB_CHECK(c.n_routed_experts % c.n_group == 0, "deepseek_v3: n_routed_experts ", c.n_routed_experts,
           " is not divisible by n_group ", c.n_group);
  BB_CHECK(c.n_routed_experts / c.n_group >= 2, "deepseek_v3: n_routed_experts / n_group = ",
           c.n_routed_experts / c.n_group, " experts per group; a group is scored by its two best, so it needs >= 2");
  BB_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, "deepseek_v3: topk_group ", c.topk_group,
           " must lie in [1, n_group = ", c.n_group, "]");
  BB_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.topk_group * (c.n_routed_experts / c.n_group),
           "deepseek_v3: num_experts_per_tok ", c.num_experts_per_tok, " must lie in [1, topk_group x experts per group = ",
           c.topk_group * (c.n_routed_experts / c.n_group), "]");
  BB_CHECK(std::isfinite(c.routed_scaling_factor) && c.routed_scaling_factor > 0,
           "deepseek_v3: routed_scaling_factor must be a finite number > 0, got ", c.routed_scaling_factor);
  BB_CHECK(c.num_nextn_predict_layers >= 0, "deepseek_v3: num_nextn_predict_layers must be >= 0, got ",
           c.num_nextn_predict_layers);
  BB_CHECK(std::isfinite(c.mtp_loss_scaling_factor) && c.mtp_loss_scaling_factor >= 0,
           "deepseek_v3: mtp_loss_scaling_factor must be a finite number >= 0, got ", c.mtp_loss_scaling_factor);
  check_rope_config(c.dense.rope);
  return c;
}

DeepseekV3Config parse_deepseek_v3_hf_config(const json& hf, const json& overrides) {
  // The dense parser reads the shared keys; MLA has no head_dim or kv heads of its own.
  // Yarn is read by read_yarn; the dense parser sees its theta only.
  json base = hf;
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (base.contains(k) && base[k].is_object() && base[k].value("rope_type", base[k].value("type", "")) == "yarn") {
      json plain = {{"rope_type", "default"}};
      if (base[k].contains("rope_theta")) plain["rope_theta"] = base[k]["rope_theta"];
      base[k] = plain;
    }
  const int64_t rope_dim = int_or(hf, "qk_rope_head_dim", 64);
  BB_CHECK(rope_dim > 0 && rope_dim % 2 == 0, "deepseek_v3: qk_rope_head_dim must be even and > 0 (rotary pairs), got ",
           rope_dim);
  base["head_dim"] = rope_dim;
  base["num_key_value_heads"] = hf.value("num_attention_heads", json(1));
  json j = parse_dense_hf_config(base, false, json::object()).to_json();
  j["model_type"] = "deepseek_v3";
  read_yarn(hf, j);
  // HF's default is 1536; an explicit null means q_proj (DeepSeek-V2-Lite).
  j["q_lora_rank"] = hf.contains("q_lora_rank") ? int_or(hf, "q_lora_rank", 0) : 1536;
  j["kv_lora_rank"] = int_or(hf, "kv_lora_rank", 512);
  j["qk_nope_head_dim"] = int_or(hf, "qk_nope_head_dim", 128);
  j["qk_rope_head_dim"] = int_or(hf, "qk_rope_head_dim", 64);
  j["v_head_dim"] = int_or(hf, "v_head_dim", 128);
  j["rope_interleave"] = hf.value("rope_interleave", true);
  j["n_routed_experts"] = int_or(hf, "n_routed_experts", 256);
  j["num_experts_per_tok"] = int_or(hf, "num_experts_per_tok", 8);
  j["moe_intermediate_size"] = int_or(hf, "moe_intermediate_size", 2048);
  j["n_shared_experts"] = int_or(hf, "n_shared_experts", 1);
  j["first_k_dense_replace"] = int_or(hf, "first_k_dense_replace", 3);
  j["n_group"] = int_or(hf, "n_group", 8);
  j["topk_group"] = int_or(hf, "topk_group", 4);
  j["routed_scaling_factor"] = hf.value("routed_scaling_factor", 2.5);
  j["norm_topk_prob"] = hf.value("norm_topk_prob", true);
  // transformers 5 writes the count as num_mtp_layers (default 1), DeepSeek's hub configs as num_nextn_predict_layers.
  j["num_nextn_predict_layers"] = int_or(hf, "num_nextn_predict_layers", int_or(hf, "num_mtp_layers", 0));
  // Not an HF key: the weight of the MTP loss (Megatron's mtp_loss_scaling_factor and its default).
  j["mtp_loss_scaling_factor"] = 0.1;
  BB_CHECK(!hf.value("attention_bias", false), "deepseek_v3: attention_bias = true is not supported");
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
  return DeepseekV3Config::from_json(j);
}

}  // namespace bb
