// Qwen3-MoE config parsing: both transformers spellings, HF's defaults, its
// rule for which layers are MoE layers, and bad values (one row each).
#include <gtest/gtest.h>

#include "bumblebee/model/qwen3_moe/qwen3_moe_config.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

nlohmann::json base_config() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 97},        {"hidden_size", 32},
          {"intermediate_size", 48},   {"num_hidden_layers", 4},  {"num_attention_heads", 4},
          {"num_key_value_heads", 2},  {"head_dim", 8},           {"moe_intermediate_size", 20},
          {"num_experts", 6},          {"num_experts_per_tok", 2}, {"rope_theta", 1e6}};
}

TEST(Qwen3MoeConfig, HFDefaultsApplyToAbsentKeys) {
  const Qwen3MoeConfig c = parse_qwen3_moe_hf_config(base_config(), nlohmann::json::object());
  EXPECT_EQ(c.num_experts, 6);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_FALSE(c.output_router_logits);
  EXPECT_DOUBLE_EQ(c.router_aux_loss_coef, 0.001);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_DOUBLE_EQ(c.dense.rope.theta, 1e6);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(c.is_moe_layer(i)) << i;
}

TEST(Qwen3MoeConfig, ReadsMixtralsExpertCountSpelling) {
  nlohmann::json hf = base_config();
  hf.erase("num_experts");
  hf["num_local_experts"] = 8;
  EXPECT_EQ(parse_qwen3_moe_hf_config(hf, nlohmann::json::object()).num_experts, 8);
}

TEST(Qwen3MoeConfig, ReadsTransformers5RopeParameters) {
  nlohmann::json hf = base_config();
  hf.erase("rope_theta");
  hf["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  EXPECT_DOUBLE_EQ(parse_qwen3_moe_hf_config(hf, nlohmann::json::object()).dense.rope.theta, 5e5);
}

// HF: layer i is sparse when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
TEST(Qwen3MoeConfig, SparseLayersFollowHFsRule) {
  nlohmann::json hf = base_config();
  hf["decoder_sparse_step"] = 2;
  hf["mlp_only_layers"] = {3};
  const Qwen3MoeConfig c = parse_qwen3_moe_hf_config(hf, nlohmann::json::object());
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_FALSE(c.is_moe_layer(3));
}

TEST(Qwen3MoeConfig, RoundTripsThroughTheNormalisedForm) {
  nlohmann::json hf = base_config();
  hf["mlp_only_layers"] = {0, 2};
  hf["norm_topk_prob"] = true;
  const Qwen3MoeConfig c = parse_qwen3_moe_hf_config(hf, {{"router_aux_loss_coef", 0.5}});
  const Qwen3MoeConfig back = Qwen3MoeConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_DOUBLE_EQ(back.router_aux_loss_coef, 0.5);
}

struct BadConfig {
  const char* what;
  nlohmann::json patch;       // merged into the base config (null values erase)
  nlohmann::json overrides;
  const char* message;
};

class Qwen3MoeBadConfig : public ::testing::TestWithParam<BadConfig> {};

TEST_P(Qwen3MoeBadConfig, FailsNamingTheValue) {
  const BadConfig& b = GetParam();
  nlohmann::json hf = base_config();
  hf.merge_patch(b.patch);
  try {
    parse_qwen3_moe_hf_config(hf, b.overrides);
    FAIL() << b.what << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << b.what << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rows, Qwen3MoeBadConfig,
    ::testing::Values(
        BadConfig{"top-k above the experts", {{"num_experts_per_tok", 7}}, nlohmann::json::object(),
                  "num_experts_per_tok 7 must lie in [1, num_experts = 6]"},
        BadConfig{"no expert count", {{"num_experts", nullptr}}, nlohmann::json::object(),
                  "needs 'num_experts' (or 'num_local_experts')"},
        BadConfig{"zero experts", {{"num_experts", 0}}, nlohmann::json::object(),
                  "'num_experts' must be positive, got 0"},
        BadConfig{"no moe_intermediate_size", {{"moe_intermediate_size", nullptr}}, nlohmann::json::object(),
                  "missing or non-integer 'moe_intermediate_size'"},
        BadConfig{"mlp_only_layers out of range", {{"mlp_only_layers", {4}}}, nlohmann::json::object(),
                  "mlp_only_layers names layer 4, outside [0, 4)"},
        BadConfig{"zero sparse step", {{"decoder_sparse_step", 0}}, nlohmann::json::object(),
                  "'decoder_sparse_step' must be positive, got 0"},
        BadConfig{"unknown override", nlohmann::json::object(), {{"num_expert", 2}},
                  "unknown model config key 'num_expert'; did you mean 'num_experts'?"}),
    [](const auto& info) {
      std::string n = info.param.what;
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

}  // namespace
}  // namespace bb
