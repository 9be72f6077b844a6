// DeepSeek-V3 config.json parsing: HF's defaults, q_lora_rank null (q_proj),
// yarn with mscale / mscale_all_dim in the softmax scale, and the fields out
// of range, each an error naming the field.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/model/deepseek_v3/deepseek_v3_config.h"

namespace bb {
namespace {

nlohmann::json tiny() {
  return {{"model_type", "deepseek_v3"}, {"vocab_size", 64},       {"hidden_size", 16},
          {"intermediate_size", 24},     {"moe_intermediate_size", 8}, {"num_hidden_layers", 2},
          {"num_attention_heads", 4},    {"kv_lora_rank", 8},      {"q_lora_rank", 12},
          {"qk_nope_head_dim", 4},       {"qk_rope_head_dim", 4},  {"v_head_dim", 6},
          {"n_routed_experts", 8},       {"num_experts_per_tok", 2}, {"n_group", 4},
          {"topk_group", 2},             {"n_shared_experts", 1},  {"first_k_dense_replace", 1},
          {"rms_norm_eps", 1e-6},        {"rope_theta", 10000.0},  {"max_position_embeddings", 64}};
}

void expect_error(const nlohmann::json& hf, const std::string& words) {
  try {
    parse_deepseek_v3_hf_config(hf, nlohmann::json::object());
    ADD_FAILURE() << "no error for " << words;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(DeepseekV3Config, ParsesAndRoundTrips) {
  const DeepseekV3Config c = parse_deepseek_v3_hf_config(tiny(), nlohmann::json::object());
  EXPECT_EQ(c.q_lora_rank, 12);
  EXPECT_EQ(c.qk_head_dim(), 8);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);   // HF's default
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.softmax_scale(), 1.0 / std::sqrt(8.0));
  EXPECT_EQ(DeepseekV3Config::from_json(c.to_json()).to_json(), c.to_json());
}

TEST(DeepseekV3Config, NullQLoraRankMeansQProj) {
  nlohmann::json hf = tiny();
  hf["q_lora_rank"] = nullptr;
  EXPECT_EQ(parse_deepseek_v3_hf_config(hf, nlohmann::json::object()).q_lora_rank, 0);
}

TEST(DeepseekV3Config, YarnMscaleAllDimScalesTheSoftmax) {
  nlohmann::json hf = tiny();
  hf["rope_scaling"] = {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 32},
                        {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  const DeepseekV3Config c = parse_deepseek_v3_hf_config(hf, nlohmann::json::object());
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_EQ(c.dense.rope.type, "yarn");
  EXPECT_NEAR(c.softmax_scale(), m * m / std::sqrt(8.0), 1e-15);
  EXPECT_DOUBLE_EQ(rope_attention_factor(c.dense.rope), 1.0);   // mscale == mscale_all_dim
}

TEST(DeepseekV3Config, FieldsOutOfRangeNameTheField) {
  auto with = [](const char* key, nlohmann::json v) {
    nlohmann::json hf = tiny();
    hf[key] = v;
    return hf;
  };
  expect_error(with("kv_lora_rank", 0), "kv_lora_rank must be > 0");
  expect_error(with("topk_group", 5), "topk_group 5 must lie in [1, n_group = 4]");
  expect_error(with("n_group", 3), "n_routed_experts 8 is not divisible by n_group 3");
  expect_error(with("qk_rope_head_dim", 3), "qk_rope_head_dim must be even");
  expect_error(with("num_experts_per_tok", 5), "num_experts_per_tok 5 must lie in [1, topk_group x experts per group = 4]");
  expect_error(with("first_k_dense_replace", 3), "first_k_dense_replace 3 must lie in [0, num_hidden_layers = 2]");
  expect_error(with("routed_scaling_factor", -1.0), "routed_scaling_factor must be a finite number > 0");
  try {
    parse_deepseek_v3_hf_config(tiny(), {{"mtp_loss_scaling_factor", -0.5}});
    ADD_FAILURE() << "no error for a negative mtp_loss_scaling_factor";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("mtp_loss_scaling_factor must be a finite number >= 0"), std::string::npos)
        << e.what();
  }
  expect_error(with("v_head_dim", 0), "v_head_dim must be > 0");
  expect_error(with("n_group", 8), "n_routed_experts / n_group = 1 experts per group");
}

}  // namespace
}  // namespace bb
