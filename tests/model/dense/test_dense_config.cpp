// Tests of model/dense/dense_config: every HF config.json field the dense
// models read is type- and range-checked, the rope spellings of transformers 4
// (rope_theta, rope_scaling) and 5 (rope_parameters) alike, and sizes whose
// products pass the parameter bound fail before anything is built. One row per
// bad input: the edit of a fixture's config.json and the words the error must
// contain (the key and the value as written).
#include <gtest/gtest.h>

#include "bumblebee/model/dense/dense_config.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

using nlohmann::json;

// qwen3_gqa spells rope the transformers 5 way (rope_parameters, default
// type), llama3_gqa the transformers 4 way (rope_theta, rope_scaling llama3).
json fixture_config(const std::string& name) { return test::read_json(test::fixture_dir(name) + "/config.json"); }

struct Row {
  std::string fixture;
  std::string pointer;   // JSON pointer of the edited key; "" edits nothing
  json value;            // the value written there; a "<erase>" string removes the key
  std::vector<std::string> words;
  json overrides = json::object();
};

json edited(const Row& r) {
  json j = fixture_config(r.fixture);
  if (r.pointer.empty()) return j;
  const json::json_pointer p(r.pointer);
  if (r.value == "<erase>") j[p.parent_pointer()].erase(p.back());
  else j[p] = r.value;
  return j;
}

std::string parse_error(const Row& r) {
  try {
    parse_dense_hf_config(edited(r), false, r.overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const json kLlama3Unscaled = {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 1024}};

TEST(DenseConfig, BadValuesNameTheKeyAndTheValueAsWritten) {
  const int64_t big = int64_t(1) << 62;
  const std::vector<Row> rows = {
      {"qwen3_gqa", "/vocab_size", "131", {"'vocab_size' = \"131\"", "must be an integer"}},
      {"qwen3_gqa", "/vocab_size", 0, {"'vocab_size' = 0", "[1, 2147483647]"}},
      {"qwen3_gqa", "/vocab_size", -5, {"'vocab_size' = -5"}},
      {"qwen3_gqa", "/vocab_size", big, {"'vocab_size' = 4611686018427387904"}},
      {"qwen3_gqa", "/vocab_size", UINT64_MAX, {"'vocab_size' = 18446744073709551615"}},
      {"qwen3_gqa", "/vocab_size", "<erase>", {"missing key 'vocab_size'"}},
      {"qwen3_gqa", "/hidden_size", int64_t(1) << 40, {"'hidden_size' = 1099511627776"}},
      {"qwen3_gqa", "/hidden_size", 48.5, {"'hidden_size' = 48.5"}},
      {"qwen3_gqa", "/intermediate_size", nullptr, {"missing key 'intermediate_size'"}},
      {"qwen3_gqa", "/num_hidden_layers", int64_t(1) << 31, {"'num_hidden_layers' = 2147483648", "[1, 65536]"}},
      {"qwen3_gqa", "/num_attention_heads", true, {"'num_attention_heads' = true"}},
      {"qwen3_gqa", "/num_key_value_heads", 0, {"'num_key_value_heads' = 0"}},
      {"qwen3_gqa", "/num_key_value_heads", 3, {"not divisible by num_key_value_heads 3"}},
      {"qwen3_gqa", "/head_dim", "16", {"'head_dim' = \"16\""}},
      {"qwen3_gqa", "/head_dim", 15, {"'head_dim' = 15", "even head_dim"}},
      {"qwen3_gqa", "/max_position_embeddings", -1, {"'max_position_embeddings' = -1"}},
      {"qwen3_gqa", "/rms_norm_eps", "1e-6", {"'rms_norm_eps' = \"1e-6\"", "finite number > 0"}},
      {"qwen3_gqa", "/rms_norm_eps", 0, {"'rms_norm_eps' = 0"}},
      {"qwen3_gqa", "/rms_norm_eps", -1e-6, {"'rms_norm_eps' = -1e-06"}},
      {"qwen3_gqa", "/initializer_range", -0.02, {"'initializer_range' = -0.02", ">= 0"}},
      {"qwen3_gqa", "/initializer_range", "0.02", {"'initializer_range' = \"0.02\""}},
      {"qwen3_gqa", "/tie_word_embeddings", "true", {"'tie_word_embeddings' = \"true\"", "true or false"}},
      {"qwen3_gqa", "/tie_word_embeddings", 1, {"'tie_word_embeddings' = 1"}},
      {"qwen3_gqa", "/hidden_act", "gelu", {"'hidden_act' = \"gelu\"", "only silu"}},
      {"qwen3_gqa", "/hidden_act", 3, {"'hidden_act' = 3", "must be a string"}},
      {"qwen3_gqa", "/model_type", 5, {"'model_type' = 5"}},
      {"qwen3_gqa", "/attention_bias", true, {"'attention_bias' = true is not supported"}},
      {"qwen3_gqa", "/attention_bias", "false", {"'attention_bias' = \"false\""}},
      {"qwen3_gqa", "/use_sliding_window", "no", {"'use_sliding_window' = \"no\""}},
      {"llama3_gqa", "/mlp_bias", 0, {"'mlp_bias' = 0"}},
      // transformers 5: rope_parameters.
      {"qwen3_gqa", "/rope_parameters", "default", {"'rope_parameters' = \"default\"", "must be an object"}},
      {"qwen3_gqa", "/rope_parameters/rope_theta", 0, {"'rope_parameters.rope_theta' = 0", "finite number > 0"}},
      {"qwen3_gqa", "/rope_parameters/rope_theta", -1e6, {"'rope_parameters.rope_theta' = -1000000.0"}},
      {"qwen3_gqa", "/rope_parameters/rope_theta", "1e6", {"'rope_parameters.rope_theta' = \"1e6\""}},
      {"qwen3_gqa", "/rope_parameters/rope_type", "yarn", {"'rope_parameters.rope_type' = \"yarn\"", "not supported"}},
      {"qwen3_gqa", "/rope_parameters/rope_type", 3, {"'rope_parameters.rope_type' = 3"}},
      {"qwen3_gqa", "/rope_parameters/partial_rotary_factor", 0.5, {"'rope_parameters.partial_rotary_factor' = 0.5"}},
      {"qwen3_gqa", "/rope_parameters", {{"rope_theta", 1e6}, {"factor", 8.0}}, {"'rope_parameters'", "no 'rope_type'"}},
      {"qwen3_gqa", "/rope_parameters",
       {{"rope_type", "llama3"}, {"rope_theta", 5e5}, {"factor", 0}, {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}},
       {"'rope_parameters.factor' = 0"}},
      // transformers 4: rope_theta and rope_scaling.
      {"llama3_gqa", "/rope_scaling", "llama3", {"'rope_scaling' = \"llama3\"", "must be an object"}},
      {"llama3_gqa", "/rope_scaling", kLlama3Unscaled, {"'rope_scaling' = {", "no 'rope_type' (or 'type')"}},
      {"llama3_gqa", "/rope_scaling", json::object(), {"'rope_scaling' = {}", "no 'rope_type'"}},
      {"llama3_gqa", "/rope_scaling/rope_type", "linear", {"'rope_scaling.rope_type' = \"linear\"", "not supported"}},
      {"llama3_gqa", "/rope_scaling/factor", 0, {"'rope_scaling.factor' = 0"}},
      {"llama3_gqa", "/rope_scaling/factor", "8", {"'rope_scaling.factor' = \"8\""}},
      {"llama3_gqa", "/rope_scaling/factor", "<erase>", {"llama3 rope scaling lacks 'factor'"}},
      {"llama3_gqa", "/rope_scaling/low_freq_factor", -1, {"'rope_scaling.low_freq_factor' = -1"}},
      {"llama3_gqa", "/rope_scaling/high_freq_factor", 0.5,
       {"'rope_scaling.high_freq_factor' = 0.5", "greater than low_freq_factor 1"}},
      {"llama3_gqa", "/rope_scaling/original_max_position_embeddings", 0,
       {"'rope_scaling.original_max_position_embeddings' = 0"}},
      {"llama3_gqa", "/rope_scaling/original_max_position_embeddings", 1024.5,
       {"'rope_scaling.original_max_position_embeddings' = 1024.5"}},
      {"llama3_gqa", "/rope_theta", 0, {"'rope_theta' = 0"}},
      {"llama3_gqa", "/rope_theta", -500000.0, {"'rope_theta' = -500000.0"}},
      {"llama3_gqa", "/rope_theta", "5e5", {"'rope_theta' = \"5e5\""}},
      // Sizes each in range whose products are not: no weight is ever allocated.
      {"qwen3_gqa", "/vocab_size", (int64_t(1) << 31) - 1, {"vocab_size 2147483647 x hidden_size 2147483647", "past the"},
       {{"hidden_size", (int64_t(1) << 31) - 1}}},
      {"qwen3_gqa", "/num_attention_heads", int64_t(1) << 20,
       {"hidden_size 48 x num_attention_heads * head_dim 1099511627776"}, {{"head_dim", int64_t(1) << 20}}},
      {"qwen3_gqa", "/intermediate_size", int64_t(1) << 30, {"num_hidden_layers 65536 x parameters per layer"},
       {{"num_layers", 65536}}},
      // Overrides are checked as the file is.
      {"qwen3_gqa", "", nullptr, {"'num_layers' = \"2\""}, {{"num_layers", "2"}}},
      {"qwen3_gqa", "", nullptr, {"'num_layers' = 0"}, {{"num_layers", 0}}},
      {"qwen3_gqa", "", nullptr, {"'num_layers' = 100000", "[1, 65536]"}, {{"num_layers", 100000}}},
      {"qwen3_gqa", "", nullptr, {"'vocab_size' = 4611686018427387904"}, {{"vocab_size", big}}},
      {"qwen3_gqa", "", nullptr, {"rope theta = 0"}, {{"rope_theta", 0}}},
      {"qwen3_gqa", "", nullptr, {"'rms_norm_eps' = -1"}, {{"rms_norm_eps", -1}}},
      {"qwen3_gqa", "", nullptr, {"'tie_word_embeddings' = \"no\""}, {{"tie_word_embeddings", "no"}}},
      {"qwen3_gqa", "", nullptr, {"unsupported rope type 'yarn'"}, {{"rope_type", "yarn"}}},
  };
  for (const Row& r : rows) {
    const std::string e = parse_error(r);
    for (const std::string& w : r.words)
      EXPECT_NE(e.find(w), std::string::npos)
          << r.fixture << " " << r.pointer << " = " << r.value.dump() << " overrides " << r.overrides.dump()
          << ": expected '" << w << "' in '" << e << "'";
  }
}

TEST(DenseConfig, ValidSpellingsParse) {
  const DenseConfig qwen = parse_dense_hf_config(fixture_config("qwen3_gqa"), true, json::object());
  EXPECT_EQ(qwen.rope.type, "default");
  EXPECT_EQ(qwen.rope.theta, 1e6);
  const DenseConfig llama = parse_dense_hf_config(fixture_config("llama3_gqa"), false, json::object());
  EXPECT_EQ(llama.rope.type, "llama3");
  EXPECT_EQ(llama.rope.factor, 8.0);
  EXPECT_EQ(llama.rope.theta, 5e5);

  // rope_scaling null is "no scaling"; the v4 key "type" names the type as rope_type does.
  json j = fixture_config("llama3_gqa");
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse_dense_hf_config(j, false, json::object()).rope.type, "default");
  j["rope_scaling"] = kLlama3Unscaled;
  j["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(parse_dense_hf_config(j, false, json::object()).rope.factor, 8.0);
  // An integer where a number is expected is that number.
  j["rope_theta"] = 500000;
  EXPECT_EQ(parse_dense_hf_config(j, false, json::object()).rope.theta, 5e5);
}

TEST(DenseConfig, NormalisedFormRoundTrips) {
  const DenseConfig c = parse_dense_hf_config(fixture_config("llama3_gqa"), false, {{"num_layers", 1}});
  EXPECT_EQ(c.num_layers, 1);
  EXPECT_EQ(DenseConfig::from_json(c.to_json()).to_json(), c.to_json());
}

}  // namespace
}  // namespace bb
