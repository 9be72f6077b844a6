// Recipe parsing: defaults, file keys and types, overrides, nearest-key errors, validation, the shipped recipes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "bumblebee/core/error.h"
#include "bumblebee/train/recipe.h"

namespace {

using bb::train::apply_recipe_override;
using bb::train::default_recipe_json;
using bb::train::merge_recipe_json;
using bb::train::recipe_from_json;
using json = nlohmann::json;

// The error message of `f`, or "" when it does not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

// A valid recipe over the tiny model and the shipped corpus, with absolute paths.
json tiny_recipe() {
  json r = default_recipe_json();
  merge_recipe_json(r,
                    {{"model", {{"hf_path", BB_SOURCE_DIR "/configs/qwen3-tiny"}, {"load_hf_weights", false}}},
                     {"data", {{"tokenizer", BB_SOURCE_DIR "/data/tokenizer.json"},
                               {"jsonl", BB_SOURCE_DIR "/data/corpus.jsonl"}, {"seq_len", 64}}}},
                    "test");
  return r;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

TEST(Recipe, DefaultsCoverEveryKeyOnce) {
  const json d = default_recipe_json();
  EXPECT_EQ(d["train"]["steps"], 100);
  EXPECT_EQ(d["optimizer"]["lr_decay_style"], "constant");
  EXPECT_EQ(d["data"]["split"], json::array({0.98, 0.02}));
  std::set<std::string> seen;
  for (const std::string& k : bb::train::recipe_key_names()) EXPECT_TRUE(seen.insert(k).second) << k;
  EXPECT_TRUE(seen.count("optimizer.adam_beta2"));
  EXPECT_TRUE(seen.count("backend.recompute"));
}

TEST(Recipe, FileValuesAndOverridesLand) {
  json r = tiny_recipe();
  merge_recipe_json(r, {{"train", {{"steps", 7}, {"micro_batch_size", 3}}}, {"optimizer", {{"lr", 0.01}}}}, "f");
  apply_recipe_override(r, "train.steps", "50");
  apply_recipe_override(r, "optimizer.min_lr", "1e-4");
  apply_recipe_override(r, "data.split", "0.9,0.1");
  apply_recipe_override(r, "output.save_hf", "true");
  apply_recipe_override(r, "backend.fp32_residual_connection", "true");
  apply_recipe_override(r, "model.overrides", R"({"num_layers": 2})");
  apply_recipe_override(r, "model.overrides", R"({"hidden_size": 64})");
  const bb::train::Recipe rec = recipe_from_json(r);
  EXPECT_EQ(rec.train.steps, 50);
  EXPECT_EQ(rec.train.micro_batch_size, 3);
  EXPECT_DOUBLE_EQ(rec.runtime.backend_cfg.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(rec.runtime.backend_cfg.optimizer.min_lr, 1e-4);
  // An unset decay horizon follows train.steps, so the schedule ends with the run.
  EXPECT_EQ(rec.runtime.backend_cfg.optimizer.total_training_steps, 50);
  EXPECT_DOUBLE_EQ(rec.data.train_fraction, 0.9);
  EXPECT_DOUBLE_EQ(rec.data.valid_fraction, 0.1);
  EXPECT_TRUE(rec.save_hf);
  EXPECT_TRUE(rec.runtime.backend_cfg.fp32_residual_connection);
  EXPECT_EQ(rec.runtime.backend_cfg.model_overrides, json({{"num_layers", 2}, {"hidden_size", 64}}));
  EXPECT_EQ(rec.runtime.backend_cfg.seed, 1234u);
  EXPECT_EQ(rec.json["train"]["steps"], 50);
}

TEST(Recipe, ListOverridesTakeJsonOrCommas) {
  json r = default_recipe_json();
  apply_recipe_override(r, "data.prefixes", "/d/a,/d/b");
  apply_recipe_override(r, "data.blend", "[0.7, 0.3]");
  EXPECT_EQ(r["data"]["prefixes"], json::array({"/d/a", "/d/b"}));
  EXPECT_EQ(r["data"]["blend"], json::array({0.7, 0.3}));
  apply_recipe_override(r, "data.prefixes", "");
  EXPECT_EQ(r["data"]["prefixes"], json::array());
}

TEST(Recipe, UnknownFileKeyNamesTheNearestKey) {
  json r = default_recipe_json();
  const std::string e = error_of([&] { merge_recipe_json(r, {{"train", {{"stpes", 5}}}}, "my.json"); });
  EXPECT_NE(e.find("my.json: unknown recipe key 'train.stpes'; did you mean 'train.steps'?"), std::string::npos) << e;
  // The right key in the wrong section points to the section that has it.
  const std::string e2 = error_of([&] { merge_recipe_json(r, {{"train", {{"lr", 0.1}}}}, "my.json"); });
  EXPECT_NE(e2.find("did you mean 'optimizer.lr'?"), std::string::npos) << e2;
  const std::string e3 = error_of([&] { merge_recipe_json(r, {{"optimiser", {{"lr", 0.1}}}}, "my.json"); });
  EXPECT_NE(e3.find("unknown recipe key 'optimiser'; did you mean 'optimizer'?"), std::string::npos) << e3;
}

TEST(Recipe, UnknownOverrideNamesTheNearestKey) {
  json r = default_recipe_json();
  const std::string e = error_of([&] { apply_recipe_override(r, "train.eval_intervall", "5"); });
  EXPECT_NE(e.find("command line: unknown recipe key 'train.eval_intervall'; did you mean 'train.eval_interval'?"),
            std::string::npos)
      << e;
  const std::string e2 = error_of([&] { apply_recipe_override(r, "tp", "2"); });
  EXPECT_NE(e2.find("did you mean 'parallel.tp'?"), std::string::npos) << e2;
}

TEST(Recipe, WrongTypesAreErrors) {
  json r = default_recipe_json();
  EXPECT_NE(error_of([&] { merge_recipe_json(r, {{"train", {{"steps", "ten"}}}}, "f"); })
                .find("recipe key 'train.steps' must be an integer, got \"ten\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_recipe_json(r, {{"train", {{"steps", 1.5}}}}, "f"); }).find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_recipe_json(r, {{"train", 5}}, "f"); }).find("section 'train' must be an object"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_recipe_json(r, {{"data", {{"split", {0.9, "x"}}}}}, "f"); })
                .find("must be a list of numbers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_recipe_override(r, "train.steps", "12x"); }).find("is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_recipe_override(r, "output.save_hf", "yes"); }).find("expected true, false"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_recipe_override(r, "model.overrides", "[1]"); }).find("must be an object"),
            std::string::npos);
  // An integral float is an integer.
  merge_recipe_json(r, {{"train", {{"steps", 20.0}}}}, "f");
  EXPECT_TRUE(r["train"]["steps"].is_number_integer());
  EXPECT_EQ(r["train"]["steps"], 20);
}

TEST(Recipe, InconsistentValuesAreErrors) {
  json r = tiny_recipe();
  apply_recipe_override(r, "data.prefixes", "/d/a");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("exactly one of data.jsonl and data.prefixes (got both"),
            std::string::npos);
  r = tiny_recipe();
  apply_recipe_override(r, "data.kind", "rlhf");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("data.kind is 'rlhf'; expected one of: pretrain, sft"),
            std::string::npos);
  r = tiny_recipe();
  apply_recipe_override(r, "data.split", "1,0");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("gives validation no documents"), std::string::npos);
  apply_recipe_override(r, "train.eval_batches", "0");
  EXPECT_EQ(error_of([&] { recipe_from_json(r); }), "");
  r = tiny_recipe();
  apply_recipe_override(r, "train.steps", "0");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("train.steps must be >= 1, got 0"), std::string::npos);
  r = tiny_recipe();
  apply_recipe_override(r, "model.hf_path", "/nonexistent/model");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("/nonexistent/model holds no config.json"),
            std::string::npos);
  r = tiny_recipe();
  apply_recipe_override(r, "data.tokenizer", "");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("qwen3-tiny/tokenizer.json does not exist"),
            std::string::npos);
}

TEST(Recipe, ShippedRecipesUseOnlyValidKeys) {
  for (const char* name : {"qwen3_tiny_pretrain", "qwen3_tiny_sft", "qwen3_tiny_sft_chat", "qwen3_1.7b_pretrain",
                           "llama3_8b_pretrain", "qwen3_1.7b_sft_full"}) {
    json r = default_recipe_json();
    const std::string path = std::string(BB_SOURCE_DIR "/recipes/") + name + ".json";
    EXPECT_EQ(error_of([&] { merge_recipe_json(r, read_json(path), path); }), "") << name;
  }
}

TEST(Recipe, TinyRecipesResolve) {
  for (const auto& [name, seq_len] :
       {std::pair{"qwen3_tiny_pretrain", 128}, {"qwen3_tiny_sft", 256}, {"qwen3_tiny_sft_chat", 512}}) {
    json r = default_recipe_json();
    merge_recipe_json(r, read_json(std::string(BB_SOURCE_DIR "/recipes/") + name + ".json"), name);
    apply_recipe_override(r, "model.hf_path", BB_SOURCE_DIR "/configs/qwen3-tiny");
    apply_recipe_override(r, "data.tokenizer", BB_SOURCE_DIR "/data/tokenizer.json");
    apply_recipe_override(r, "data.jsonl", BB_SOURCE_DIR "/data/corpus.jsonl");
    const bb::train::Recipe rec = recipe_from_json(r);
    EXPECT_EQ(rec.data.seq_len, seq_len) << name;
    EXPECT_FALSE(rec.runtime.backend_cfg.load_hf_weights) << name;
    EXPECT_EQ(rec.runtime.backend_cfg.device, "cpu") << name;
  }
}

// The LoRA SFT recipes are the full fine-tuning recipe plus a "peft" section (the peft.* keys of LoRA): without
// it they use only valid keys.
TEST(Recipe, LoraSftRecipesAreFullRecipesWithPeftKeys) {
  for (const char* name : {"qwen3_1.7b_sft_lora", "llama3_8b_sft_lora"}) {
    json file = read_json(std::string(BB_SOURCE_DIR "/recipes/") + name + ".json");
    ASSERT_TRUE(file.contains("peft")) << name;
    EXPECT_EQ(file["peft"]["type"], "lora");
    EXPECT_EQ(file["peft"]["rank"], 16);
    EXPECT_EQ(file["peft"]["alpha"], 32);
    EXPECT_EQ(file["peft"]["target_modules"], "all-linear");
    file.erase("peft");
    json r = default_recipe_json();
    EXPECT_EQ(error_of([&] { merge_recipe_json(r, file, name); }), "") << name;
    EXPECT_EQ(file["data"]["sft_format"], "messages") << name;
  }
}

TEST(Recipe, LargeRecipesAskForTheModelDirectory) {
  json r = default_recipe_json();
  merge_recipe_json(r, read_json(BB_SOURCE_DIR "/recipes/llama3_8b_pretrain.json"), "llama3");
  EXPECT_EQ(r["backend"]["device"], "cuda");
  EXPECT_NE(error_of([&] { recipe_from_json(r); }).find("model.hf_path"), std::string::npos);
}

TEST(Recipe, RuntimeKeysAreTheConfigSchemas) {
  bb::ConfigSchema schema("test", "");
  schema.add_runtime_keys();
  std::map<std::string, const bb::train::RecipeKey*> by_schema_key;
  for (const bb::train::RecipeKey& k : bb::train::recipe_keys())
    if (k.runtime_key) by_schema_key[k.runtime_key->name] = &k;
  for (const bb::ConfigKey& k : schema.keys()) {
    ASSERT_TRUE(by_schema_key.count(k.name)) << k.name << " is not a recipe key";
    EXPECT_EQ(by_schema_key[k.name]->default_value, k.default_value) << k.name;
    EXPECT_NE(by_schema_key[k.name]->help.find(k.doc), std::string::npos) << k.name;
  }
  EXPECT_EQ(by_schema_key.size(), schema.keys().size());
  EXPECT_EQ(by_schema_key["backend.parallel.tp"]->key, "parallel.tp");
  EXPECT_EQ(by_schema_key["hf_path"]->key, "model.hf_path");
  EXPECT_EQ(by_schema_key["backend.model_overrides"]->key, "model.overrides");
  EXPECT_EQ(by_schema_key["backend.seed"]->key, "train.seed");
  EXPECT_EQ(by_schema_key["backend"]->key, "backend.backend");
  EXPECT_EQ(by_schema_key["optimizer.no_weight_decay_1d"]->key, "optimizer.no_weight_decay_1d");
  EXPECT_EQ(by_schema_key["backend.attention_backend"]->key, "backend.attention_backend");
}

TEST(Recipe, RuntimeSectionsLandAndAreCheckedByTheSchema) {
  json r = tiny_recipe();
  merge_recipe_json(r, {{"parallel", {{"tp", 2}}}, {"backend", {{"attention_backend", "flash"}}}}, "f.json");
  apply_recipe_override(r, "optimizer.no_weight_decay_1d", "false");
  apply_recipe_override(r, "train.seed", "7");
  const bb::train::Recipe rec = recipe_from_json(r);
  EXPECT_EQ(rec.runtime.backend_cfg.parallel.tp, 2);
  EXPECT_EQ(rec.runtime.backend_cfg.attention_backend, "flash");
  EXPECT_FALSE(rec.runtime.backend_cfg.optimizer.no_weight_decay_1d);
  EXPECT_EQ(rec.runtime.backend_cfg.seed, 7u);
  EXPECT_EQ(rec.train.seed, 7u);
  EXPECT_NE(error_of([&] { merge_recipe_json(r, {{"parallel", {{"tp", 0}}}}, "f.json"); })
                .find("f.json: recipe key 'parallel.tp': 0 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_recipe_override(r, "parallel.tp", "99999999999"); })
                .find("command line: recipe key 'parallel.tp': '99999999999' does not fit"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_recipe_override(r, "optimizer.lr", "nan"); }).find("'nan' is not a finite number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { merge_recipe_json(r, {{"backend", {{"recompute", "some"}}}}, "f.json"); })
                .find("recipe key 'backend.recompute': \"some\" is not one of: none, selective, full"),
            std::string::npos);
}

}  // namespace

// Found by the recipe fuzz target: a path longer than the system allows threw
// std::filesystem_error from the existence checks. One row per path key.
TEST(Recipe, OverlongPathsAreRecipeErrors) {
  const std::string overlong(5000, 'x');
  const std::pair<const char*, const char*> rows[] = {
      {"model.hf_path", "holds no config.json"},
      {"data.tokenizer", "does not exist"},
      {"data.jsonl", "File name too long"},
  };
  for (const auto& [key, words] : rows) {
    json r = tiny_recipe();
    apply_recipe_override(r, key, overlong);
    EXPECT_NE(error_of([&] { recipe_from_json(r); }).find(words), std::string::npos) << key;
  }
  const std::string text = R"({"model": {"hf_path": ")" + overlong + R"("}})";
  EXPECT_NE(error_of([&] { bb::train::recipe_from_text(text, "long.json", {}); }).find("holds no config.json"),
            std::string::npos);
}
