// Parsing of HF Llama/Qwen3 config.json into DenseConfig, with every field
// type- and range-checked.
//
// Messages name the key and the value as written ("'rope_theta' = 0: must be
// a finite number > 0"); the caller that knows the file prefixes its path.
#include "bumblebee/model/dense/dense_config.h"

#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

#include "bumblebee/core/edit_distance.h"
#include "bumblebee/core/error.h"

namespace bb {

namespace {
using nlohmann::json;

// Bounds on sizes. A dimension below 2^31 keeps the product of any two within
// int64, and no released model comes near; the layer and parameter bounds are
// far past any model too, but stop a typo from allocating or looping for hours.
constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxLayers = int64_t(1) << 16;
constexpr int64_t kMaxParams = int64_t(1) << 44;   // 1.8e13 parameters
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// One config value and the key it was read from ("rope_scaling.factor").
struct Field {
  const json* value;
  std::string key;
};

// The field `key` of `obj`, or nothing when absent or null (HF writes null for "unset").
std::optional<Field> find(const json& obj, const std::string& key, const std::string& name) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  return Field{&*it, name};
}
std::optional<Field> find(const json& obj, const std::string& key) { return find(obj, key, key); }

Field require(const json& obj, const std::string& key) {
  std::optional<Field> f = find(obj, key);
  BB_CHECK(f, "missing key '", key, "'");
  return *f;
}

[[noreturn]] void bad_value(const Field& f, const std::string& why) {
  BB_FAIL("'", f.key, "' = ", f.value->dump(), ": ", why);
}

int64_t as_int(const Field& f, int64_t lo, int64_t hi) {
  const json& v = *f.value;
  const bool fits = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxInt64));
  const int64_t x = fits ? v.get<int64_t>() : 0;
  if (!fits || x < lo || x > hi)
    bad_value(f, detail::concat("must be an integer in [", lo, ", ", hi, "]"));
  return x;
}

// A finite number, > 0 (or >= 0 with allow_zero). JSON integers count as numbers.
double as_real(const Field& f, bool allow_zero) {
  const json& v = *f.value;
  const double x = v.is_number() ? v.get<double>() : std::nan("");
  if (!std::isfinite(x) || x < 0 || (x == 0 && !allow_zero))
    bad_value(f, allow_zero ? "must be a finite number >= 0" : "must be a finite number > 0");
  return x;
}

bool as_bool(const Field& f) {
  if (!f.value->is_boolean()) bad_value(f, "must be true or false");
  return f.value->get<bool>();
}

std::string as_string(const Field& f) {
  if (!f.value->is_string()) bad_value(f, "must be a string");
  return f.value->get<std::string>();
}

void reject_true(const json& j, const char* key, const char* why) {
  if (std::optional<Field> f = find(j, key); f && as_bool(*f))
    BB_FAIL("'", key, "' = true is not supported (", why, ")");
}

// The rope keys: v5 rope_parameters, overridden by v4 rope_scaling, each with
// the dotted key it came from. Both blocks may be null (no scaling).
std::map<std::string, Field> rope_fields(const json& hf) {
  std::map<std::string, Field> fields;
  for (const char* block : {"rope_parameters", "rope_scaling"}) {
    std::optional<Field> b = find(hf, block);
    if (!b) continue;
    if (!b->value->is_object()) bad_value(*b, "must be an object such as {\"rope_type\": \"llama3\", ...} or null");
    bool typed = false, scaling = std::string(block) == "rope_scaling";
    for (const auto& [k, v] : b->value->items()) {
      fields.insert_or_assign(k, Field{&v, std::string(block) + "." + k});
      typed = typed || k == "rope_type" || k == "type";
      scaling = scaling || (k != "rope_theta" && k != "partial_rotary_factor");
    }
    // A scaling block without its type would be read as no scaling at all.
    if (scaling && !typed)
      bad_value(*b, "names no 'rope_type' (or 'type'), so the scaling it describes cannot be applied");
  }
  return fields;
}

void read_rope(const json& hf, RopeConfig& r) {
  const std::map<std::string, Field> fields = rope_fields(hf);
  const auto get = [&](const char* k) -> std::optional<Field> {
    const auto it = fields.find(k);
    return it == fields.end() || it->second.value->is_null() ? std::nullopt : std::optional<Field>(it->second);
  };
  if (std::optional<Field> f = get("rope_theta")) r.theta = as_real(*f, false);
  else if (std::optional<Field> t = find(hf, "rope_theta")) r.theta = as_real(*t, false);
  std::optional<Field> type = get("rope_type");
  if (!type) type = get("type");
  r.type = type ? as_string(*type) : "default";
  if (r.type == "llama3") {
    const auto need = [&](const char* k) {
      std::optional<Field> f = get(k);
      BB_CHECK(f, "llama3 rope scaling lacks '", k, "'");
      return *f;
    };
    r.factor = as_real(need("factor"), false);
    r.low_freq_factor = as_real(need("low_freq_factor"), false);
    const Field high = need("high_freq_factor");
    r.high_freq_factor = as_real(high, false);
    if (r.high_freq_factor <= r.low_freq_factor)
      bad_value(high, detail::concat("must be greater than low_freq_factor ", r.low_freq_factor));
    r.original_max_position_embeddings = as_int(need("original_max_position_embeddings"), 1, kMaxInt64);
  } else if (r.type != "default") {
    bad_value(*type, "rope type is not supported (supported: default, llama3)");
  }
  std::optional<Field> partial = get("partial_rotary_factor");
  if (!partial) partial = find(hf, "partial_rotary_factor");
  if (partial && as_real(*partial, false) != 1.0)
    bad_value(*partial, "partial rotary embedding is not supported (only 1.0)");
}

// a * b, or an error naming both when the product leaves [0, kMaxParams].
int64_t checked_product(int64_t a, const char* a_name, int64_t b, const char* b_name) {
  int64_t p = 0;
  BB_CHECK(!__builtin_mul_overflow(a, b, &p) && p <= kMaxParams, a_name, " ", a, " x ", b_name, " ", b,
           " is past the ", kMaxParams, " elements one model may hold");
  return p;
}

// Ranges of every field and the products that size the weights, before
// anything is allocated: the parameter count must stay within kMaxParams.
void validate(const DenseConfig& c) {
  for (auto [v, name] : {std::pair{c.vocab_size, "vocab_size"}, {c.hidden_size, "hidden_size"},
                         {c.intermediate_size, "intermediate_size"}, {c.num_heads, "num_heads"},
                         {c.num_kv_heads, "num_kv_heads"}, {c.head_dim, "head_dim"}})
    BB_CHECK(v >= 1 && v <= kMaxDim, "'", name, "' = ", v, ": must be an integer in [1, ", kMaxDim, "]");
  BB_CHECK(c.num_layers >= 1 && c.num_layers <= kMaxLayers, "'num_layers' = ", c.num_layers,
           ": must be an integer in [1, ", kMaxLayers, "]");
  BB_CHECK(c.max_position_embeddings >= 1, "'max_position_embeddings' = ", c.max_position_embeddings,
           ": must be an integer >= 1");
  BB_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0, "'rms_norm_eps' = ", c.rms_norm_eps,
           ": must be a finite number > 0");
  BB_CHECK(std::isfinite(c.initializer_range) && c.initializer_range >= 0, "'initializer_range' = ",
           c.initializer_range, ": must be a finite number >= 0");
  BB_CHECK(c.num_heads % c.num_kv_heads == 0, "num_attention_heads ", c.num_heads,
           " is not divisible by num_key_value_heads ", c.num_kv_heads);
  BB_CHECK(c.head_dim % 2 == 0, "'head_dim' = ", c.head_dim, ": rotary embedding needs an even head_dim");
  check_rope_config(c.rope);

  const int64_t q = checked_product(c.num_heads, "num_attention_heads", c.head_dim, "head_dim");
  const int64_t kv = checked_product(c.num_kv_heads, "num_key_value_heads", c.head_dim, "head_dim");
  const int64_t h = c.hidden_size;
  const int64_t per_layer[] = {checked_product(h, "hidden_size", q, "num_attention_heads * head_dim"),
                               checked_product(h, "hidden_size", kv, "num_key_value_heads * head_dim"),
                               checked_product(h, "hidden_size", c.intermediate_size, "intermediate_size"),
                               h, q};
  const int64_t multiples[] = {2, 2, 3, 2, 2};   // q+o, k+v, gate+up+down, two norms, q/k norms (upper bound)
  int64_t layer = 0;
  for (size_t i = 0; i < std::size(per_layer); ++i) layer += multiples[i] * per_layer[i];   // each <= 2^44: no overflow
  const int64_t layers = checked_product(c.num_layers, "num_hidden_layers", layer, "parameters per layer");
  const int64_t embedding = checked_product(c.vocab_size, "vocab_size", h, "hidden_size");
  const int64_t total = layers + embedding * (c.tie_word_embeddings ? 1 : 2) + h;
  BB_CHECK(total <= kMaxParams, "the config describes ", total, " parameters, past the ", kMaxParams,
           " one model may hold");
}

// The normalised form's fields by type, for from_json.
int64_t int_field(const json& j, const char* key) { return as_int(require(j, key), 1, kMaxInt64); }
double real_field(const json& j, const char* key) { return as_real(require(j, key), true); }
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
  BB_CHECK(j.is_object(), "a dense model config must be a JSON object, got ", j.dump());
  DenseConfig c;
  c.model_type = as_string(require(j, "model_type"));
  c.vocab_size = int_field(j, "vocab_size");
  c.hidden_size = int_field(j, "hidden_size");
  c.intermediate_size = int_field(j, "intermediate_size");
  c.num_layers = int_field(j, "num_layers");
  c.num_heads = int_field(j, "num_heads");
  c.num_kv_heads = int_field(j, "num_kv_heads");
  c.head_dim = int_field(j, "head_dim");
  c.max_position_embeddings = int_field(j, "max_position_embeddings");
  c.rms_norm_eps = real_field(j, "rms_norm_eps");
  c.initializer_range = real_field(j, "initializer_range");
  c.tie_word_embeddings = as_bool(require(j, "tie_word_embeddings"));
  c.qk_norm = as_bool(require(j, "qk_norm"));
  c.rope.theta = real_field(j, "rope_theta");
  c.rope.type = as_string(require(j, "rope_type"));
  // yarn's attention factor is applied by the MLA attention only (deepseek_v3).
  BB_CHECK(c.rope.type == "default" || c.rope.type == "llama3", "unsupported rope type '", c.rope.type,
           "' for dense models (supported: default, llama3)");
  c.rope.factor = real_field(j, "rope_factor");
  c.rope.low_freq_factor = real_field(j, "rope_low_freq_factor");
  c.rope.high_freq_factor = real_field(j, "rope_high_freq_factor");
  c.rope.original_max_position_embeddings = int_field(j, "rope_original_max_position_embeddings");
  validate(c);
  return c;
}

DenseConfig parse_dense_hf_config(const nlohmann::json& hf, bool qk_norm, const nlohmann::json& overrides) {
  BB_CHECK(hf.is_object(), "config.json is not a JSON object");
  DenseConfig c;
  if (std::optional<Field> f = find(hf, "model_type")) c.model_type = as_string(*f);
  c.vocab_size = as_int(require(hf, "vocab_size"), 1, kMaxDim);
  c.hidden_size = as_int(require(hf, "hidden_size"), 1, kMaxDim);
  c.intermediate_size = as_int(require(hf, "intermediate_size"), 1, kMaxDim);
  c.num_layers = as_int(require(hf, "num_hidden_layers"), 1, kMaxLayers);
  c.num_heads = as_int(require(hf, "num_attention_heads"), 1, kMaxDim);
  const std::optional<Field> kv = find(hf, "num_key_value_heads");
  c.num_kv_heads = kv ? as_int(*kv, 1, kMaxDim) : c.num_heads;
  if (std::optional<Field> f = find(hf, "head_dim")) {
    c.head_dim = as_int(*f, 1, kMaxDim);
  } else {
    BB_CHECK(c.hidden_size % c.num_heads == 0, "hidden_size ", c.hidden_size,
             " is not divisible by num_attention_heads ", c.num_heads, " and head_dim is absent");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.max_position_embeddings = 4096;
  if (std::optional<Field> f = find(hf, "max_position_embeddings")) c.max_position_embeddings = as_int(*f, 1, kMaxInt64);
  if (std::optional<Field> f = find(hf, "rms_norm_eps")) c.rms_norm_eps = as_real(*f, false);
  if (std::optional<Field> f = find(hf, "initializer_range")) c.initializer_range = as_real(*f, true);
  if (std::optional<Field> f = find(hf, "tie_word_embeddings")) c.tie_word_embeddings = as_bool(*f);
  c.qk_norm = qk_norm;
  read_rope(hf, c.rope);
  reject_true(hf, "attention_bias", "attention projections without bias only");
  reject_true(hf, "mlp_bias", "MLP projections without bias only");
  reject_true(hf, "use_sliding_window", "sliding-window attention is not implemented");
  if (std::optional<Field> f = find(hf, "hidden_act"); f && as_string(*f) != "silu")
    bad_value(*f, "activation is not supported (only silu / SwiGLU)");
  BB_CHECK(c.num_heads % c.num_kv_heads == 0, "num_attention_heads ", c.num_heads,
           " is not divisible by num_key_value_heads ", c.num_kv_heads);

  BB_CHECK(overrides.is_object() || overrides.is_null(), "model config overrides must be a JSON object of ",
           "normalised keys, got ", overrides.dump());
  json j = c.to_json();
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
