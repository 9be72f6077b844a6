// The recipe schema, file merging and command-line overrides with key and type checks, and validation.
#include "bumblebee/train/recipe.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"
#include "bumblebee/core/edit_distance.h"
#include "bumblebee/runtime/config_schema.h"

namespace bb::train {

namespace {

using json = nlohmann::json;
using T = RecipeKeyType;

// The recipe's spelling of a runtime key: the model's keys under "model", the
// parallel sizes under "parallel", the seed under "train", the HF export's
// keys under "output" (output.export_dtype, ...); the rest as they are.
std::string recipe_name(const std::string& schema_name) {
  static const std::map<std::string, std::string> renamed = {
      {"backend", "backend.backend"},
      {"hf_path", "model.hf_path"},
      {"plugin", "model.plugin"},
      {"backend.model_name", "model.model_name"},
      {"backend.load_hf_weights", "model.load_hf_weights"},
      {"backend.model_overrides", "model.overrides"},
      {"backend.seed", "train.seed"}};
  if (auto it = renamed.find(schema_name); it != renamed.end()) return it->second;
  const std::string parallel = "backend.parallel.";
  if (schema_name.starts_with(parallel)) return "parallel." + schema_name.substr(parallel.size());
  const std::string exporting = "export.";
  if (schema_name.starts_with(exporting)) return "output.export_" + schema_name.substr(exporting.size());
  return schema_name;
}

RecipeKeyType recipe_type(ConfigType t) {
  switch (t) {
    case ConfigType::String: return T::String;
    case ConfigType::Int: return T::Int;
    case ConfigType::Float: return T::Float;
    case ConfigType::Bool: return T::Bool;
    case ConfigType::Json: return T::Object;
  }
  BB_FAIL("recipe: unhandled config key type");
}

const ConfigSchema& runtime_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s("bb-train", "bb-train recipe=FILE.json [section.key=value ...]");
    s.add_runtime_keys();
    return s;
  }();
  return schema;
}

// The error_code form: the throwing one raises std::filesystem_error for names the
// system rejects (too long, ...), which are the user's bad paths like missing ones.
bool path_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

// The recipe's own keys, then the runtime's from the schema, in the order of recipe.h's layout.
std::vector<RecipeKey> build_keys() {
  const std::vector<RecipeKey> runtime = [] {
    std::vector<RecipeKey> keys;
    for (const ConfigKey& k : runtime_schema().keys())
      keys.push_back({recipe_name(k.name), recipe_type(k.type), k.default_value, config_key_doc(k), &k});
    return keys;
  }();
  const std::vector<RecipeKey> own = {
      {"description", T::String, "", "free text saying what the recipe is for (not used by the run)"},
      {"data.kind", T::String, "pretrain", "pretrain (fixed-length samples across documents) or sft (conversations)"},
      {"data.tokenizer", T::String, "", "tokenizer.json; empty: model.hf_path/tokenizer.json"},
      {"data.jsonl", T::String, "", "JSONL corpus, tokenised into OUT/data/ at start"},
      {"data.jsonl_key", T::String, "text", "field of each JSONL line holding the document text"},
      {"data.sft_format", T::String, "paragraphs",
       "sft: paragraphs (prompt = first sentence of a paragraph, response = the rest) or prompt_response "
       "(lines with \"prompt\" and \"response\" fields, one ChatML turn) or messages (lines with HF's \"messages\": "
       "[{\"role\", \"content\"}, ...], rendered by the chat template)"},
      {"data.chat_template", T::String, "",
       "sft_format=messages: chatml | qwen3 | llama3 | llama3.1; empty: recognised from the chat_template of the "
       "tokenizer_config.json beside data.tokenizer"},
      {"data.prefixes", T::StringList, json::array(), "pretrain: Megatron indexed datasets PREFIX(.bin/.idx)"},
      {"data.blend", T::FloatList, json::array(), "weights of data.prefixes (empty: equal weights)"},
      {"data.seq_len", T::Int, 1024, "tokens per sample (pretrain) or per packed row (sft)"},
      {"data.split", T::FloatList, json::array({0.98, 0.02}), "[train, valid] fractions of the documents"},
      {"train.steps", T::Int, 100, "optimizer steps"},
      {"train.micro_batch_size", T::Int, 1, "sequences per microbatch (sft: packed rows of data.seq_len tokens)"},
      {"train.num_microbatches", T::Int, 1, "microbatches per step (gradient accumulation)"},
      {"train.eval_interval", T::Int, 100, "validate every N steps (0: only after the last step)"},
      {"train.eval_batches", T::Int, 4, "global batches of held-out data per validation (0: no validation)"},
      {"train.log_interval", T::Int, 1, "print a step line every N steps"},
      {"train.resume", T::Bool, false, "continue from the training checkpoint OUT/checkpoint when it exists"},
      {"output.dir", T::String, "runs/train", "run directory: logs, event files, loss.svg, checkpoint"},
      {"output.save_hf", T::Bool, false, "write the trained model as an HF directory OUT/hf at the end"},
      {"output.save_interval", T::Int, 0,
       "write a training checkpoint (model, optimizer, steps) to OUT/checkpoint every N steps and at the end (0: none)"},
  };
  std::vector<RecipeKey> out;
  for (const char* section : {"description", "model", "data", "train", "optimizer", "parallel", "peft", "backend", "output"})
    for (const std::vector<RecipeKey>* keys : {&own, &runtime})
      for (const RecipeKey& k : *keys)
        if (section_of(k.key) == section) out.push_back(k);
  BB_CHECK(out.size() == own.size() + runtime.size(), "recipe: a key outside the recipe's sections");
  return out;
}

const char* type_name(RecipeKeyType t) {
  switch (t) {
    case T::String: return "a string";
    case T::Bool: return "a boolean";
    case T::Int: return "an integer";
    case T::Float: return "a number";
    case T::StringList: return "a list of strings";
    case T::FloatList: return "a list of numbers";
    case T::Object: return "an object";
  }
  return "?";
}

const RecipeKey* find_key(const std::string& key) {
  for (const RecipeKey& k : recipe_keys())
    if (k.key == key) return &k;
  return nullptr;
}

bool is_section(const std::string& path) {
  for (const RecipeKey& k : recipe_keys())
    if (k.key.size() > path.size() && k.key.starts_with(path) && k.key[path.size()] == '.') return true;
  return false;
}

std::string last_part(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// The valid key or section the user most likely meant: a key with the same last
// part in another section ("train.lr" -> "optimizer.lr"), else the nearest key or
// section ("optimiser" -> "optimizer") by edit distance.
std::string nearest_key(const std::string& key) {
  for (const RecipeKey& k : recipe_keys())
    if (last_part(k.key) == last_part(key)) return k.key;
  std::vector<std::string> candidates;
  for (const RecipeKey& k : recipe_keys()) {
    candidates.push_back(k.key);
    const size_t dot = k.key.find('.');
    if (dot != std::string::npos) candidates.push_back(k.key.substr(0, dot));
  }
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = std::min(edit_distance(key, c), edit_distance(last_part(key), last_part(c)) + 1);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& source) {
  BB_FAIL(source, ": unknown recipe key '", key, "'; did you mean '", nearest_key(key), "'?");
}

json::json_pointer pointer_of(const std::string& key) {
  std::string p = key;
  std::replace(p.begin(), p.end(), '.', '/');
  return json::json_pointer("/" + p);
}

[[noreturn]] void wrong_type(const RecipeKey& k, const json& v, const std::string& source) {
  BB_FAIL(source, ": recipe key '", k.key, "' must be ", type_name(k.type), ", got ", v.dump());
}

// `v` checked against the key's type, integers written as integers.
json checked_value(const RecipeKey& k, const json& v, const std::string& source) {
  if (k.runtime_key) return check_config_value(*k.runtime_key, v, source + ": recipe key '" + k.key + "'");
  auto wrong = [&]() { wrong_type(k, v, source); };
  switch (k.type) {
    case T::String:
      if (!v.is_string()) wrong();
      return v;
    case T::Bool:
      if (!v.is_boolean()) wrong();
      return v;
    case T::Int:
      if (v.is_number_integer()) return v;
      if (v.is_number_float() && std::nearbyint(v.get<double>()) == v.get<double>() &&
          std::fabs(v.get<double>()) < 9.0e18)
        return json(int64_t(v.get<double>()));
      wrong_type(k, v, source);
    case T::Float:
      if (!v.is_number()) wrong();
      return json(v.get<double>());
    case T::StringList:
      if (!v.is_array()) wrong();
      for (const json& e : v)
        if (!e.is_string()) wrong();
      return v;
    case T::FloatList: {
      if (!v.is_array()) wrong();
      json out = json::array();
      for (const json& e : v) {
        if (!e.is_number()) wrong();
        out.push_back(e.get<double>());
      }
      return out;
    }
    case T::Object:
      if (!v.is_object()) wrong();
      return v;
  }
  wrong_type(k, v, source);
}

void set_value(json& recipe, const RecipeKey& k, const json& v) {
  json& slot = recipe[pointer_of(k.key)];
  if (k.type == T::Object) {
    slot.update(v);   // layers of overrides add up key by key
  } else {
    slot = v;
  }
}

void merge_object(json& recipe, const json& file, const std::string& prefix, const std::string& source) {
  for (const auto& [name, value] : file.items()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (const RecipeKey* k = find_key(path)) {
      set_value(recipe, *k, checked_value(*k, value, source));
    } else if (is_section(path)) {
      BB_CHECK(value.is_object(), source, ": recipe section '", path, "' must be an object, got ", value.dump());
      merge_object(recipe, value, path, source);
    } else {
      unknown_key(path, source);
    }
  }
}

json parse_json_text(const std::string& key, const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    BB_FAIL("override ", key, "=", text, ": not valid JSON (", e.what(), ")");
  }
}

template <typename Number>
Number parse_number(const std::string& key, const std::string& text, const char* what) {
  Number out{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  BB_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), "override ", key, "=", text,
           ": '", text, "' is not ", what);
  return out;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    out.push_back(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

json parse_override(const RecipeKey& k, const std::string& text) {
  if (k.runtime_key) return parse_config_value(*k.runtime_key, text, "command line: recipe key '" + k.key + "'");
  switch (k.type) {
    case T::String:
      return text;
    case T::Bool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      BB_FAIL("override ", k.key, "=", text, ": expected true, false, 1 or 0");
    case T::Int:
      return parse_number<int64_t>(k.key, text, "an integer");
    case T::Float:
      return parse_number<double>(k.key, text, "a number");
    case T::StringList:
    case T::FloatList: {
      if (text.starts_with("[")) return parse_json_text(k.key, text);
      json out = json::array();
      for (const std::string& item : split_commas(text)) {
        if (k.type == T::StringList) {
          out.push_back(item);
        } else {
          out.push_back(parse_number<double>(k.key, item, "a number"));
        }
      }
      return out;
    }
    case T::Object:
      return parse_json_text(k.key, text);
  }
  BB_FAIL("override ", k.key, ": unhandled key type");
}

// Reads typed values out of the resolved recipe (already type-checked).
struct Reader {
  const json& j;
  std::string str(const std::string& key) const { return j.at(pointer_of(key)).get<std::string>(); }
  bool flag(const std::string& key) const { return j.at(pointer_of(key)).get<bool>(); }
  int64_t integer(const std::string& key) const { return j.at(pointer_of(key)).get<int64_t>(); }
  double number(const std::string& key) const { return j.at(pointer_of(key)).get<double>(); }
  const json& raw(const std::string& key) const { return j.at(pointer_of(key)); }
};

void check_choice(const std::string& key, const std::string& value, const std::vector<std::string>& choices) {
  std::string list;
  for (const std::string& c : choices) {
    if (value == c) return;
    list += (list.empty() ? "" : ", ") + c;
  }
  BB_FAIL("recipe key ", key, " is '", value, "'; expected one of: ", list);
}

}  // namespace

const std::vector<RecipeKey>& recipe_keys() {
  static const std::vector<RecipeKey> keys = build_keys();
  return keys;
}

std::vector<std::string> recipe_key_names() {
  std::vector<std::string> out;
  for (const RecipeKey& k : recipe_keys()) out.push_back(k.key);
  return out;
}

json default_recipe_json() {
  json out = json::object();
  for (const RecipeKey& k : recipe_keys()) out[pointer_of(k.key)] = k.default_value;
  return out;
}

void merge_recipe_json(json& recipe, const json& file, const std::string& source) {
  BB_CHECK(file.is_object(), source, ": a recipe must be a JSON object, got ", file.type_name());
  merge_object(recipe, file, "", source);
}

void check_recipe_key(const std::string& key, const std::string& source) {
  if (!find_key(key)) unknown_key(key, source);
}

void apply_recipe_override(json& recipe, const std::string& key, const std::string& value) {
  const RecipeKey* k = find_key(key);
  if (!k) unknown_key(key, "command line");
  set_value(recipe, *k, checked_value(*k, parse_override(*k, value), "command line"));
}

Recipe recipe_from_json(const json& resolved) {
  const Reader r{resolved};
  Recipe out;
  out.json = resolved;

  RuntimeConfig& rc = out.runtime;
  for (const RecipeKey& k : recipe_keys())
    if (k.runtime_key) k.runtime_key->set(rc, check_config_value(*k.runtime_key, r.raw(k.key), "recipe key '" + k.key + "'"));
  BB_CHECK(!rc.hf_path.empty(),
           "recipe key model.hf_path is empty: give the HF model directory (config.json), e.g. model.hf_path=DIR");
  BB_CHECK(path_exists(rc.hf_path + "/config.json"), "model.hf_path ", rc.hf_path,
           " holds no config.json (relative paths start at the working directory ",
           std::filesystem::current_path().string(), ")");
  check_input_file(rc.hf_path + "/config.json", "model config");

  TrainRecipe& t = out.train;
  t.steps = r.integer("train.steps");
  t.micro_batch_size = r.integer("train.micro_batch_size");
  t.num_microbatches = r.integer("train.num_microbatches");
  t.eval_interval = r.integer("train.eval_interval");
  t.eval_batches = r.integer("train.eval_batches");
  t.log_interval = r.integer("train.log_interval");
  t.seed = rc.backend_cfg.seed;
  t.resume = r.flag("train.resume");
  for (const char* key : {"train.steps", "train.micro_batch_size", "train.num_microbatches", "train.log_interval"})
    BB_CHECK(r.integer(key) >= 1, "recipe key ", key, " must be >= 1, got ", r.integer(key));
  for (const char* key : {"train.eval_interval", "train.eval_batches"})
    BB_CHECK(r.integer(key) >= 0, "recipe key ", key, " must be >= 0, got ", r.integer(key));

  OptimizerConfig& o = rc.backend_cfg.optimizer;
  if (o.total_training_steps == 0) o.total_training_steps = t.steps;
  BB_CHECK(o.lr > 0 && o.min_lr <= o.lr, "recipe keys optimizer.lr = ", o.lr, " and optimizer.min_lr = ", o.min_lr,
           " must satisfy 0 <= min_lr <= lr, lr > 0");

  DataRecipe& d = out.data;
  d.kind = r.str("data.kind");
  check_choice("data.kind", d.kind, {"pretrain", "sft"});
  d.tokenizer = r.str("data.tokenizer");
  if (d.tokenizer.empty()) d.tokenizer = rc.hf_path + "/tokenizer.json";
  BB_CHECK(path_exists(d.tokenizer), "tokenizer ", d.tokenizer,
           " does not exist (set data.tokenizer, or put tokenizer.json into model.hf_path)");
  // The data files are checked here, before the run touches its output directory.
  check_input_file(d.tokenizer, "data.tokenizer");
  d.jsonl = r.str("data.jsonl");
  d.jsonl_key = r.str("data.jsonl_key");
  d.sft_format = r.str("data.sft_format");
  check_choice("data.sft_format", d.sft_format, {"paragraphs", "prompt_response", "messages"});
  d.chat_template = r.str("data.chat_template");
  if (!d.chat_template.empty())
    check_choice("data.chat_template", d.chat_template, {"chatml", "qwen3", "llama3", "llama3.1"});
  d.prefixes = r.raw("data.prefixes").get<std::vector<std::string>>();
  d.blend = r.raw("data.blend").get<std::vector<double>>();
  d.seq_len = r.integer("data.seq_len");
  BB_CHECK(d.seq_len >= 2, "recipe key data.seq_len must be >= 2, got ", d.seq_len);
  BB_CHECK(d.jsonl.empty() != d.prefixes.empty(), "give exactly one of data.jsonl and data.prefixes (got ",
           d.jsonl.empty() ? "neither" : "both", "; clear one with data.jsonl= or data.prefixes=)");
  BB_CHECK(d.kind == "pretrain" || !d.jsonl.empty(), "data.kind=sft builds conversations from data.jsonl; "
           "data.prefixes hold pretraining tokens only");
  if (!d.jsonl.empty()) check_input_file(d.jsonl, "data.jsonl");
  for (const std::string& prefix : d.prefixes)
    for (const char* suffix : {".idx", ".bin"}) check_input_file(prefix + suffix, "data.prefixes dataset file");
  BB_CHECK(d.blend.empty() || d.blend.size() == d.prefixes.size(), "data.blend has ", d.blend.size(),
           " weights for ", d.prefixes.size(), " data.prefixes");
  double blend_total = 0;
  for (double w : d.blend) {
    BB_CHECK(std::isfinite(w) && w >= 0, "data.blend weight ", w, " is not a finite non-negative number");
    blend_total += w;
  }
  BB_CHECK(d.blend.empty() || blend_total > 0, "data.blend weights sum to zero");
  const std::vector<double> split = r.raw("data.split").get<std::vector<double>>();
  BB_CHECK(split.size() == 2, "data.split must be [train, valid], got ", split.size(), " numbers");
  BB_CHECK(split[0] > 0 && split[1] >= 0 && std::isfinite(split[0] + split[1]),
           "data.split [", split[0], ", ", split[1], "] needs train > 0 and valid >= 0");
  d.train_fraction = split[0] / (split[0] + split[1]);
  d.valid_fraction = split[1] / (split[0] + split[1]);
  BB_CHECK(t.eval_batches == 0 || d.valid_fraction > 0, "train.eval_batches = ", t.eval_batches,
           " but data.split gives validation no documents; set train.eval_batches=0 or a valid fraction");

  out.output_dir = r.str("output.dir");
  BB_CHECK(!out.output_dir.empty(), "recipe key output.dir is empty");
  out.save_hf = r.flag("output.save_hf");
  out.save_interval = r.integer("output.save_interval");
  BB_CHECK(out.save_interval >= 0, "recipe key output.save_interval must be >= 0, got ", out.save_interval);
  return out;
}

Recipe recipe_from_text(const std::string& text, const std::string& source,
                        const std::vector<std::pair<std::string, std::string>>& overrides) {
  json file;
  try {
    file = json::parse(text);
  } catch (const json::exception& e) {
    BB_FAIL("recipe ", source, " is not valid JSON: ", e.what());
  }
  json recipe = default_recipe_json();
  merge_recipe_json(recipe, file, source);
  for (const auto& [key, value] : overrides) apply_recipe_override(recipe, key, value);
  return recipe_from_json(recipe);
}

Recipe load_recipe(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides) {
  return recipe_from_text(read_input_file(path, "recipe"), path, overrides);
}

}  // namespace bb::train
