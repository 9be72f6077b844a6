// Recipe: one training run as a JSON file, the input of bb-train.
//
//   {"model":     {"hf_path", "model_name", "load_hf_weights", "overrides"},
//    "data":      {"kind": "pretrain"|"sft", "tokenizer", "jsonl" | "prefixes" + "blend", "seq_len", "split"},
//    "train":     {"steps", "micro_batch_size", "num_microbatches", "eval_interval", "eval_batches",
//                  "log_interval", "seed", "resume"},
//    "optimizer": {the fields of bb::OptimizerConfig},
//    "parallel":  {"tp", "etp", "ep", "pp", "vpp", "cp", "pp_layout"},
//    "backend":   {"backend", "device", "dtype", "recompute", "fp32_residual_connection", ...},
//    "output":    {"dir", "save_hf", "save_interval"}}
//
// The runtime's keys are the config schema's (runtime/config_schema.h), with
// the same type, default, doc and checks, spelled by section: schema key
// backend.parallel.tp is recipe "parallel": {"tp"}, hf_path is model.hf_path,
// backend.model_name / load_hf_weights / model_overrides are model.model_name /
// load_hf_weights / overrides, backend.seed is train.seed, and backend=... is
// backend.backend; optimizer.* and the other backend.* keep their names.
//
// Every key has a default (recipe_keys() lists them with their types and
// meaning); a file gives only what it changes, and dotted command-line
// overrides (train.steps=50) change single keys afterwards. A key that is not
// in the schema, in the file or on the command line, is a bb::Error that names
// the nearest valid key; so is a value of the wrong type. model.overrides is
// the one free-form object: its keys belong to the model.
// Relative paths are relative to the working directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/runtime/config.h"
#include "bumblebee/runtime/config_schema.h"

namespace bb::train {

enum class RecipeKeyType { String, Bool, Int, Float, StringList, FloatList, Object };

struct RecipeKey {
  std::string key;             // dotted: "train.steps"
  RecipeKeyType type;
  nlohmann::json default_value;
  std::string help;
  const ConfigKey* runtime_key = nullptr;   // the schema key it sets, for the runtime's keys
};

// Every key of a recipe, in documentation order.
const std::vector<RecipeKey>& recipe_keys();

struct DataRecipe {
  std::string kind;                   // pretrain | sft
  std::string tokenizer;              // tokenizer.json path (default: model.hf_path/tokenizer.json)
  std::string jsonl, jsonl_key;       // a JSONL corpus, tokenised into the run directory
  std::string sft_format;             // sft: paragraphs | prompt_response | messages
  std::string chat_template;          // sft messages: chatml | qwen3 | llama3 | llama3.1; empty: tokenizer_config.json
  std::vector<std::string> prefixes;  // pretrain: Megatron indexed datasets (PREFIX.bin/.idx)
  std::vector<double> blend;          // weights of the prefixes (empty: equal)
  int64_t seq_len = 0;
  double train_fraction = 0, valid_fraction = 0;   // data.split, normalised to sum to one
};

struct TrainRecipe {
  int64_t steps = 0;
  int64_t micro_batch_size = 0;   // sequences (pretrain) or packed rows of seq_len tokens (sft) per microbatch
  int64_t num_microbatches = 0;
  int64_t eval_interval = 0;      // 0: validate only after the last step
  int64_t eval_batches = 0;       // 0: no validation
  int64_t log_interval = 0;       // stdout every N steps (metrics.jsonl and TensorBoard get every step)
  uint64_t seed = 0;
  bool resume = false;            // continue from OUT/checkpoint when it exists
};

struct Recipe {
  nlohmann::json json;      // the resolved recipe: every key, after file and overrides
  RuntimeConfig runtime;
  DataRecipe data;
  TrainRecipe train;
  std::string output_dir;
  bool save_hf = false;
  int64_t save_interval = 0;      // training checkpoint to OUT/checkpoint every N steps and at the end (0: none)
};

// The defaults of every key, as a nested JSON object.
nlohmann::json default_recipe_json();

// Lays the recipe `file` (parsed JSON) over `recipe`, checking every key and value type.
// `source` names the file in errors.
void merge_recipe_json(nlohmann::json& recipe, const nlohmann::json& file, const std::string& source);

// Sets one dotted key from its command-line text: numbers, true/false, lists as
// JSON ([0.9, 0.1]) or comma-separated (a,b), model.overrides as a JSON object.
void apply_recipe_override(nlohmann::json& recipe, const std::string& key, const std::string& value);

// Checks the values (ranges, choices, consistency) and fills the typed views.
Recipe recipe_from_json(const nlohmann::json& resolved);

// Parses the recipe JSON `text`, lays it over the defaults, then applies the overrides
// in order; `source` names the text in errors.
Recipe recipe_from_text(const std::string& text, const std::string& source,
                        const std::vector<std::pair<std::string, std::string>>& overrides);

// Reads FILE and hands its text to recipe_from_text.
Recipe load_recipe(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides);

// Every dotted key, for KeyValueArgs.
std::vector<std::string> recipe_key_names();

// bb::Error naming the nearest valid key unless `key` is a recipe key; `source` names where it came from.
void check_recipe_key(const std::string& key, const std::string& source);

}  // namespace bb::train
