// bb-train: train a model from a recipe file over the runtime API.
//
//   bb-train recipe=FILE.json [section.key=value ...]
//   bb-train help                      (every recipe key with its type, default and meaning)
//
// FILE.json is a recipe (bumblebee/train/recipe.h, docs/training.md);
// each dotted key=value overrides one recipe key, e.g.
//   bb-train recipe=recipes/qwen3_tiny_pretrain.json train.steps=50 output.dir=/tmp/run
// Each step prints loss, grad_norm, lr, tokens/s, trained (loss) tokens and elapsed time and is logged
// to OUT/metrics.jsonl and a TensorBoard event file; validation runs every
// train.eval_interval steps; the run ends with OUT/loss.svg and
// OUT/final_metrics.json. Under mpirun / bbrun every rank runs it; rank 0 writes.
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "bumblebee/core/error.h"
#include "bumblebee/runtime/cli_args.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/tool_main.h"
#include "bumblebee/train/recipe.h"
#include "bumblebee/train/trainer.h"

using namespace bb;

namespace {

const char* type_name(train::RecipeKeyType t) {
  switch (t) {
    case train::RecipeKeyType::String: return "string";
    case train::RecipeKeyType::Bool: return "bool";
    case train::RecipeKeyType::Int: return "int";
    case train::RecipeKeyType::Float: return "float";
    case train::RecipeKeyType::StringList: return "list";
    case train::RecipeKeyType::FloatList: return "list";
    case train::RecipeKeyType::Object: return "json";
  }
  return "?";
}

// Every recipe key with type, default and meaning, grouped by section; the
// runtime sections come from the config schema.
void print_keys() {
  std::printf("bb-train recipe=FILE.json [section.key=value ...]\n\nrecipe keys (type, default, meaning), by section:\n");
  std::string section;
  for (const train::RecipeKey& k : train::recipe_keys()) {
    const std::string s = k.key.substr(0, k.key.find('.'));
    if (s != section) std::printf("\n%s:\n", (section = s).c_str());
    std::string def = k.default_value.is_string() ? k.default_value.get<std::string>() : k.default_value.dump();
    if (def.empty()) def = "\"\"";
    std::printf("  %-36s %-6s %-12s %s\n", k.key.c_str(), type_name(k.type), def.c_str(), k.help.c_str());
  }
}

int run(int argc, char** argv) {
  if (asks_for_help(argc, argv)) {
    print_keys();
    return 0;
  }
  const std::vector<std::string> words(argv + 1, argv + argc);
  // Recipe keys get the recipe's own "did you mean" (the nearest key, whatever its distance).
  for (const std::string& word : words) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos && eq > 0 && word.substr(0, eq) != "recipe")
      train::check_recipe_key(word.substr(0, eq), "command line");
  }
  std::set<std::string> known;
  for (const std::string& k : train::recipe_key_names()) known.insert(k);
  known.insert("recipe");
  std::string path;
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const KeyValue& kv : parse_key_values(words, known, "bb-train")) {
    if (kv.key == "recipe") {
      path = kv.value;
    } else {
      overrides.emplace_back(kv.key, kv.value);
    }
  }
  BB_CHECK(!path.empty(),
           "recipe=FILE is required, e.g. recipe=recipes/qwen3_tiny_pretrain.json (bb-train help lists the keys)");
  const train::Recipe recipe = train::load_recipe(path, overrides);
  train::run_training(recipe, std::filesystem::path(path).stem().string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
