// bb-train: train a model from a recipe file over the runtime API.
//
//   bb-train recipe=FILE.json [section.key=value ...]
//   bb-train help                      (every recipe key with its default and meaning)
//
// FILE.json is a recipe (bumblebee/train/recipe.h, docs/training.md);
// each dotted key=value overrides one recipe key, e.g.
//   bb-train recipe=recipes/qwen3_tiny_pretrain.json train.steps=50 output.dir=/tmp/run
// Each step prints loss, grad_norm, lr, tokens/s and elapsed time and is logged
// to OUT/metrics.jsonl and a TensorBoard event file; validation runs every
// train.eval_interval steps; the run ends with OUT/loss.svg and
// OUT/final_metrics.json. Under mpirun / bbrun every rank runs it; rank 0 writes.
#include <cstdio>
#include <filesystem>

#include "bumblebee/core/error.h"
#include "bumblebee/runtime/cli_args.h"
#include "bumblebee/runtime/tool_main.h"
#include "bumblebee/train/recipe.h"
#include "bumblebee/train/trainer.h"

using namespace bb;

namespace {

void print_keys() {
  std::printf("bb-train recipe=FILE.json [section.key=value ...]\n\nrecipe keys (default: meaning):\n");
  for (const train::RecipeKey& k : train::recipe_keys())
    std::printf("  %-32s %-14s %s\n", k.key.c_str(), k.default_value.dump().c_str(), k.help.c_str());
}

int run(int argc, char** argv) {
  // Recipe keys get the recipe's own "did you mean" (the nearest key, whatever its distance).
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq != std::string::npos && eq > 0 && arg.substr(0, eq) != "recipe")
      train::check_recipe_key(arg.substr(0, eq), "command line");
  }
  std::vector<std::string> keys = train::recipe_key_names();
  keys.push_back("recipe");
  const KeyValueArgs args = KeyValueArgs::parse(argc, argv, keys);
  for (const std::string& p : args.positional()) {
    if (p == "help" || p == "--help" || p == "-h") {
      print_keys();
      return 0;
    }
    BB_FAIL("unexpected argument '", p, "': arguments are recipe=FILE and key=value overrides (bb-train help)");
  }
  BB_CHECK(args.has("recipe"),
           "recipe=FILE is required, e.g. recipe=recipes/qwen3_tiny_pretrain.json (bb-train help lists the keys)");
  const std::string path = args.get("recipe", "");
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const auto& [key, value] : args.values())
    if (key != "recipe") overrides.emplace_back(key, value);
  const train::Recipe recipe = train::load_recipe(path, overrides);
  train::run_training(recipe, std::filesystem::path(path).stem().string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
