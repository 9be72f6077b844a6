// Qwen3-MoE checkpoints: the per-expert and the fused fixture load the same
// way HF reads them (checked by the parity test); here the mapping's table,
// the fused layout's slicing against the per-expert one, export in the
// per-expert layout, and a checkpoint mixing both layouts in one layer.
#include <gtest/gtest.h>

#include <filesystem>

#include "bumblebee/model/qwen3_moe/qwen3_moe_checkpoint.h"
#include "bumblebee/model/registry.h"
#include "bumblebee/primitive/ckpt/safetensors.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

Qwen3MoeConfig fixture_config(const std::string& name) {
  return parse_qwen3_moe_hf_config(test::read_json(test::fixture_dir(name) + "/config.json"),
                                   nlohmann::json::object());
}

TEST(Qwen3MoeCheckpoint, MappingReplacesOnlyTheMoELayersMLP) {
  const Qwen3MoeConfig cfg = fixture_config("qwen3_moe_mixed");   // layer 0 dense, layers 1-2 MoE
  std::set<std::string> names;
  for (const WeightRule& r : qwen3_moe_checkpoint_mapping(cfg, {0, cfg.num_experts}).rules) names.insert(r.hf_name);
  EXPECT_TRUE(names.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(names.count("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_TRUE(names.count("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(names.count("model.layers.2.mlp.experts.4.down_proj.weight"));
  EXPECT_FALSE(names.count("model.layers.2.mlp.experts.5.down_proj.weight"));
}

// The fused file's expert e, gate rows then up rows, equals what the loader put in the per-expert parameters.
TEST(Qwen3MoeCheckpoint, FusedLayoutSlicesEachExpertsGateThenUpRows) {
  const std::string dir = test::fixture_dir("qwen3_moe_fused");
  const nlohmann::json hf = test::read_json(dir + "/config.json");
  auto protocol = resolve_model("auto", "lite", "qwen3_moe");
  BuildContext ctx;
  ctx.parallel = std::make_shared<ParallelContext>(dist::ParallelState::single_rank());
  ctx.dtype = ctx.grad_dtype = ctx.residual_dtype = DType::F64;
  auto chunk = protocol->build_model(protocol->build_model_config(hf, nlohmann::json::object()), ctx);
  const HFCheckpoint ckpt = HFCheckpoint::open(dir);
  protocol->load_hf_weights(*chunk, ckpt);
  const Qwen3MoeConfig cfg = fixture_config("qwen3_moe_fused");
  EXPECT_TRUE(qwen3_moe_layer_is_fused(ckpt, cfg, 1));
  const std::vector<double> gu = ckpt.get("model.layers.1.mlp.experts.gate_up_proj").to(DType::F64).to_doubles();
  const int64_t f = cfg.moe_intermediate_size, h = cfg.dense.hidden_size, e = 4;
  const std::vector<double> up = chunk->params().get("model.layers.1.mlp.experts.4.up_proj.weight").value.to_doubles();
  const std::vector<double> want(gu.begin() + (e * 2 * f + f) * h, gu.begin() + (e * 2 * f + 2 * f) * h);
  EXPECT_EQ(up, want);

  // Export writes the per-expert (hub) layout.
  std::set<std::string> exported;
  protocol->export_hf_weights(*chunk, *ctx.parallel, [&](const std::string& n, const Tensor&) { exported.insert(n); });
  EXPECT_TRUE(exported.count("model.layers.1.mlp.experts.4.up_proj.weight"));
  EXPECT_FALSE(exported.count("model.layers.1.mlp.experts.gate_up_proj"));
}

TEST(Qwen3MoeCheckpoint, RejectsALayerHoldingBothLayouts) {
  const std::string src = test::fixture_dir("qwen3_moe_fused");
  const std::string dir = ::testing::TempDir() + "/qwen3_moe_both_layouts";
  std::filesystem::create_directories(dir);
  const HFCheckpoint ckpt = HFCheckpoint::open(src);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : ckpt.names()) tensors.emplace_back(n, ckpt.get(n).clone());
  tensors.emplace_back("model.layers.0.mlp.experts.2.gate_proj.weight", Tensor::zeros({20, 32}, DType::F32));
  save_hf_checkpoint(dir, tensors);
  try {
    qwen3_moe_layer_is_fused(HFCheckpoint::open(dir), fixture_config("qwen3_moe_fused"), 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 holds its experts both fused"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.experts.2.gate_proj.weight"), std::string::npos);
  }
}

}  // namespace
}  // namespace bb
