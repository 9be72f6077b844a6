// Parsing of HF Llama/Qwen3 config.json into DenseConfig.
#include "bumblebee/model/dense/dense_config.h"

#include "bumblebee/core/edit_distance.h"
#include "bumblebee/core/error.h"

namespace bb {

namespace {
int64_t get_int(const nlohmann::json& j, const char* key) {
  BB_CHECK(j.contains(key) && j[key].is_number_integer(), "config.json: missing or non-integer '", key, "'");
  const int64_t v = j[key].get<int64_t>();
  BB_CHECK(v > 0, "config.json: '", key, "' must be positive, got ", v);
  return v;
}

void reject_true(const nlohmann::json& j, const char* key, const char* why) {
  if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
    BB_FAIL("config.json: '", key, "' = true is not supported (", why, ")");
}

void read_rope(const nlohmann::json& hf, RopeConfig& r) {
  // v5: rope_parameters holds theta and scaling; v4: rope_theta + rope_scaling.
  nlohmann::json scaling = nlohmann::json::object();
  if (hf.contains("rope_parameters") && hf["rope_parameters"].is_object()) scaling = hf["rope_parameters"];
  if (hf.contains("rope_scaling") && hf["rope_scaling"].is_object()) scaling.update(hf["rope_scaling"]);
  if (scaling.contains("rope_theta")) r.theta = scaling["rope_theta"].get<double>();
  else if (hf.contains("rope_theta")) r.theta = hf["rope_theta"].get<double>();
  std::string type = "default";
  if (scaling.contains("rope_type")) type = scaling["rope_type"].get<std::string>();
  else if (scaling.contains("type")) type = scaling["type"].get<std::string>();
  r.type = type;
  if (type == "llama3") {
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      BB_CHECK(scaling.contains(k), "config.json: llama3 rope scaling lacks '", k, "'");
    r.factor = scaling["factor"].get<double>();
    r.low_freq_factor = scaling["low_freq_factor"].get<double>();
    r.high_freq_factor = scaling["high_freq_factor"].get<double>();
    r.original_max_position_embeddings = scaling["original_max_position_embeddings"].get<int64_t>();
  } else {
    BB_CHECK(type == "default", "config.json: rope type '", type, "' is not supported (supported: default, llama3)");
  }
}
}  // namespace

nlohmann::json DenseConfig::to_json() const {
  return {{"model_type", model_type},
          {"vocab_size", vocab_size},
          {"hidden_size", hidden_size},
          {"intermediate_size", intermediate_size},
          {"num_layers", num_layers},
          {"num_heads", num_heads},
          {"num_kv_heads", num_kv_heads},
          {"head_dim", head_dim},
          {"max_position_embeddings", max_position_embeddings},
          {"rms_norm_eps", rms_norm_eps},
          {"initializer_range", initializer_range},
          {"tie_word_embeddings", tie_word_embeddings},
          {"qk_norm", qk_norm},
          {"rope_theta", rope.theta},
          {"rope_type", rope.type},
          {"rope_factor", rope.factor},
          {"rope_low_freq_factor", rope.low_freq_factor},
          {"rope_high_freq_factor", rope.high_freq_factor},
          {"rope_original_max_position_embeddings", rope.original_max_position_embeddings}};
}

DenseConfig DenseConfig::from_json(const nlohmann::json& j) {
  DenseConfig c;
  c.model_type = j.at("model_type").get<std::string>();
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  c.hidden_size = j.at("hidden_size").get<int64_t>();
  c.intermediate_size = j.at("intermediate_size").get<int64_t>();
  c.num_layers = j.at("num_layers").get<int64_t>();
  c.num_heads = j.at("num_heads").get<int64_t>();
  c.num_kv_heads = j.at("num_kv_heads").get<int64_t>();
  c.head_dim = j.at("head_dim").get<int64_t>();
  c.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
  c.rms_norm_eps = j.at("rms_norm_eps").get<double>();
  c.initializer_range = j.at("initializer_range").get<double>();
  c.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
  c.qk_norm = j.at("qk_norm").get<bool>();
  c.rope.theta = j.at("rope_theta").get<double>();
  c.rope.type = j.at("rope_type").get<std::string>();
  c.rope.factor = j.at("rope_factor").get<double>();
  c.rope.low_freq_factor = j.at("rope_low_freq_factor").get<double>();
  c.rope.high_freq_factor = j.at("rope_high_freq_factor").get<double>();
  c.rope.original_max_position_embeddings = j.at("rope_original_max_position_embeddings").get<int64_t>();
  return c;
}

DenseConfig parse_dense_hf_config(const nlohmann::json& hf, bool qk_norm, const nlohmann::json& overrides) {
  BB_CHECK(hf.is_object(), "config.json is not a JSON object");
  DenseConfig c;
  c.model_type = hf.value("model_type", std::string());
  c.vocab_size = get_int(hf, "vocab_size");
  c.hidden_size = get_int(hf, "hidden_size");
  c.intermediate_size = get_int(hf, "intermediate_size");
  c.num_layers = get_int(hf, "num_hidden_layers");
  c.num_heads = get_int(hf, "num_attention_heads");
  c.num_kv_heads = hf.contains("num_key_value_heads") && !hf["num_key_value_heads"].is_null()
                       ? get_int(hf, "num_key_value_heads")
                       : c.num_heads;
  if (hf.contains("head_dim") && !hf["head_dim"].is_null()) {
    c.head_dim = get_int(hf, "head_dim");
  } else {
    BB_CHECK(c.hidden_size % c.num_heads == 0, "config.json: hidden_size ", c.hidden_size,
             " is not divisible by num_attention_heads ", c.num_heads, " and head_dim is absent");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.max_position_embeddings = hf.value("max_position_embeddings", int64_t(4096));
  c.rms_norm_eps = hf.value("rms_norm_eps", 1e-6);
  c.initializer_range = hf.value("initializer_range", 0.02);
  c.tie_word_embeddings = hf.value("tie_word_embeddings", false);
  c.qk_norm = qk_norm;
  read_rope(hf, c.rope);
  reject_true(hf, "attention_bias", "attention projections without bias only");
  reject_true(hf, "mlp_bias", "MLP projections without bias only");
  reject_true(hf, "use_sliding_window", "sliding-window attention is not implemented");
  const std::string act = hf.value("hidden_act", std::string("silu"));
  BB_CHECK(act == "silu", "config.json: hidden_act '", act, "' is not supported (only silu / SwiGLU)");
  BB_CHECK(c.num_heads % c.num_kv_heads == 0, "config.json: num_attention_heads ", c.num_heads,
           " is not divisible by num_key_value_heads ", c.num_kv_heads);

  nlohmann::json j = c.to_json();
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
  return DenseConfig::from_json(j);
}

}  // namespace bb
