// LoRA through the runtime (peft.* keys) on the qwen3_gqa fixture in float64:
// only the adapters train (the optimizer holds state for them alone); base +
// an adapter made by HF peft (tests/fixtures/qwen3_gqa_lora, made by
// tests/fixtures/make_peft_fixtures.py) gives peft's logits, loss and adapter
// gradient norms; save_peft_adapter -> peft.adapter_path is bit-identical; the
// merged HF export (peft.merge_on_export) gives the logits of base + adapter;
// a training checkpoint keeps the adapters. The DoRA adapter
// (tests/fixtures/qwen3_gqa_dora) goes through the same peft, round-trip and
// merge checks. LoRA on the fused MoE experts (peft's target_parameters,
// tests/fixtures/qwen3_moe_lora over qwen3_moe_fused) matches peft's logits,
// loss and the gradient norms of its fused lora_A / lora_B, and saves to
// peft's tensors bit for bit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/ckpt/peft_expert_adapter.h"
#include "bumblebee/primitive/ckpt/safetensors.h"
#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

const char* kAllLinear = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";

RuntimeConfig lora_config(const std::string& adapter_path = "", const std::string& type = "lora") {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("qwen3_gqa");
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.peft.type = type;
  cfg.backend_cfg.peft.target_modules = kAllLinear;
  cfg.backend_cfg.peft.rank = 4;
  cfg.backend_cfg.peft.alpha = 8.0;
  cfg.backend_cfg.peft.adapter_path = adapter_path;
  cfg.backend_cfg.optimizer.lr = 1e-2;
  return cfg;
}

std::string temp_dir(const std::string& what) {
  const fs::path dir = fs::path(testing::TempDir()) / ("bb_peft_" + what + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

double max_rel_error(const std::vector<double>& ours, const std::vector<double>& theirs) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    err = std::max(err, std::abs(ours[i] - theirs[i]));
    scale = std::max(scale, std::abs(theirs[i]));
  }
  return err / scale;
}

std::vector<double> adapter_values(ModelHandle& h) {
  std::vector<double> out;
  for (const Parameter& p : h.model().params().params())
    if (is_lora_param(p.name)) {
      const std::vector<double> v = p.value.to_doubles();
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}

TEST(Peft, OnlyAdaptersTrainAndTheOptimizerHoldsTheirStateAlone) {
  auto rt = create_runtime(lora_config());
  ModelHandle h = rt->build_model();
  int64_t adapter_numel = 0, adapters = 0;
  for (const Parameter& p : h.model().params().params()) {
    EXPECT_EQ(p.requires_grad(), is_lora_param(p.name)) << p.name;
    if (is_lora_param(p.name)) adapter_numel += shape_numel(p.local_shape), ++adapters;
  }
  EXPECT_EQ(adapters, 2 * 7 * 2);   // A and B of seven modules in two layers
  int64_t state = 0;
  for (DistributedOptimizer::GroupState& g : h.optimizer().groups()) {
    for (const Parameter* p : g.group->params()) EXPECT_TRUE(is_lora_param(p->name)) << p->name;
    EXPECT_EQ(g.exp_avg.numel(), g.exp_avg_sq.numel());
    state += g.exp_avg.numel() - g.padding_in_shard;
  }
  EXPECT_EQ(state, adapter_numel);
  for (const auto& g : h.model().params().groups())
    if (!g->trainable()) EXPECT_FALSE(g->flat_grads().defined()) << g->name();

  // Fresh adapters (B = 0) leave the model as loaded; a step moves only the adapters.
  const PackedBatch batch = test::fixture_batch("qwen3_gqa");
  const std::vector<double> base_logits = test::fixture_logits("qwen3_gqa");
  EXPECT_LT(max_rel_error(rt->logits(h, batch).to_doubles(), base_logits), 1e-9);
  const std::vector<double> q_before =
      h.model().params().get("model.layers.0.self_attn.q_proj.weight").value.to_doubles();
  auto train = rt->train_mode(h);
  for (int step = 0; step < 2; ++step) {
    rt->zero_grad(h);
    rt->forward_backward(h, batch);
    ASSERT_TRUE(rt->optimizer_step(h).update_successful);
  }
  EXPECT_EQ(h.model().params().get("model.layers.0.self_attn.q_proj.weight").value.to_doubles(), q_before);
  EXPECT_NE(h.model().params().get("model.layers.0.self_attn.q_proj.lora_B.weight").value.to_doubles(),
            std::vector<double>(48 * 4, 0.0));
}

// Base + peft's adapter `name` against peft's logits, loss and gradient norms.
void expect_matches_peft_reference(const std::string& name, const std::string& type) {
  const std::string fixture = test::fixture_dir(name);
  const nlohmann::json ref = test::read_json(fixture + "/reference.json");
  auto rt = create_runtime(lora_config(fixture, type));
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_gqa");
  EXPECT_LT(max_rel_error(rt->logits(h, batch).to_doubles(), test::fixture_logits(name)), 1e-9);

  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  const ForwardResult r = rt->forward_backward(h, batch);
  EXPECT_LT(rel(r.loss, ref["loss"].get<double>()), 1e-9);
  double total = 0;
  int matched = 0;
  for (const Parameter& p : h.model().params().params()) {
    if (!p.requires_grad()) continue;
    const double sq = ops::sum_squares(p.grad);
    total += sq;
    const std::string name = "base_model.model." + p.name;
    ASSERT_TRUE(ref["per_param_grad_norm"].contains(name)) << name;
    EXPECT_LT(rel(std::sqrt(sq), ref["per_param_grad_norm"][name].get<double>()), 1e-8) << name;
    ++matched;
  }
  EXPECT_EQ(size_t(matched), ref["per_param_grad_norm"].size());
  EXPECT_LT(rel(std::sqrt(total), ref["grad_norm"].get<double>()), 1e-9);
}

TEST(Peft, PeftMadeAdapterMatchesPeftsLogitsLossAndGradNorms) { expect_matches_peft_reference("qwen3_gqa_lora", "lora"); }

// DoRA: the magnitude vectors load under peft's key and get peft's gradients.
TEST(Peft, PeftMadeDoraAdapterMatchesPeftsLogitsLossAndGradNorms) {
  expect_matches_peft_reference("qwen3_gqa_dora", "dora");
}

// One step from peft's adapter `name`, saved and loaded again.
void expect_saved_adapter_reloads(const std::string& name, const std::string& type) {
  auto rt = create_runtime(lora_config(test::fixture_dir(name), type));
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  rt->forward_backward(h, test::fixture_batch("qwen3_gqa"));
  ASSERT_TRUE(rt->optimizer_step(h).update_successful);
  const std::string dir = temp_dir("roundtrip");
  rt->save_peft_adapter(h, dir);

  const SafetensorsFile saved = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  const SafetensorsFile peft = SafetensorsFile::open(test::fixture_dir(name) + "/adapter_model.safetensors");
  EXPECT_EQ(saved.names(), peft.names());
  const nlohmann::json config = test::read_json(dir + "/adapter_config.json");
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["use_dora"], type == "dora");

  auto rt2 = create_runtime(lora_config(dir, type));
  ModelHandle h2 = rt2->build_model();
  EXPECT_EQ(adapter_values(h2), adapter_values(h));
  fs::remove_all(dir);
}

TEST(Peft, SavedAdapterReloadsBitIdenticalAndHasPeftsNames) { expect_saved_adapter_reloads("qwen3_gqa_lora", "lora"); }
TEST(Peft, SavedDoraAdapterReloadsBitIdenticalAndHasPeftsNames) {
  expect_saved_adapter_reloads("qwen3_gqa_dora", "dora");
}

// The HF export with peft's adapter `name` merged in, loaded as a plain model.
void expect_merged_export_matches(const std::string& name, const std::string& type) {
  RuntimeConfig cfg = lora_config(test::fixture_dir(name), type);
  cfg.backend_cfg.peft.merge_on_export = true;
  cfg.export_cfg.dtype = "param";   // float64 on disk: the merge itself is what is compared
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_gqa");
  const std::vector<double> adapted = rt->logits(h, batch).to_doubles();
  const std::string dir = temp_dir("merged");
  rt->save_hf_checkpoint(h, dir);

  RuntimeConfig plain;
  plain.backend = "ref";
  plain.hf_path = dir;
  plain.backend_cfg.dtype = "float64";
  auto rt2 = create_runtime(plain);
  ModelHandle h2 = rt2->build_model();
  EXPECT_LT(max_rel_error(rt2->logits(h2, batch).to_doubles(), adapted), 1e-12);
  fs::remove_all(dir);
}

TEST(Peft, MergedExportGivesTheLogitsOfBasePlusAdapter) { expect_merged_export_matches("qwen3_gqa_lora", "lora"); }
TEST(Peft, MergedDoraExportGivesTheLogitsOfBasePlusAdapter) { expect_merged_export_matches("qwen3_gqa_dora", "dora"); }

// peft.dropout: forward-only calls see no dropout; training draws masks from
// the seed, the step and the microbatch, so a second run repeats the first and
// a second forward_backward of the same step draws new ones.
TEST(Peft, DropoutTrainsWithSeededMasksAndEvaluatesWithout) {
  const std::string fixture = test::fixture_dir("qwen3_gqa_lora");
  RuntimeConfig with = lora_config(fixture);
  with.backend_cfg.peft.dropout = 0.3;
  auto plain_rt = create_runtime(lora_config(fixture));
  auto rt = create_runtime(with), again_rt = create_runtime(with);
  ModelHandle plain = plain_rt->build_model(), h = rt->build_model(), again = again_rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_gqa");
  EXPECT_EQ(rt->logits(h, batch).to_doubles(), plain_rt->logits(plain, batch).to_doubles());
  EXPECT_EQ(rt->forward_backward(h, batch, {}, 1, true).loss,
            plain_rt->forward_backward(plain, batch, {}, 1, true).loss);
  auto train = rt->train_mode(h);
  auto train_plain = plain_rt->train_mode(plain);
  auto train_again = again_rt->train_mode(again);
  const double first = rt->forward_backward(h, batch).loss;
  EXPECT_NE(first, plain_rt->forward_backward(plain, batch).loss);
  EXPECT_EQ(again_rt->forward_backward(again, batch).loss, first);
  EXPECT_NE(rt->forward_backward(h, batch).loss, first);
}

RuntimeConfig expert_lora_config(const std::string& adapter_path) {
  RuntimeConfig cfg = lora_config(adapter_path);
  cfg.hf_path = test::fixture_dir("qwen3_moe_fused");
  cfg.backend_cfg.peft.target_modules = "q_proj,k_proj,v_proj,o_proj";
  cfg.backend_cfg.peft.target_parameters = "mlp.experts.gate_up_proj,mlp.experts.down_proj";
  return cfg;
}

TEST(Peft, PeftMadeExpertAdapterMatchesPeftsLogitsLossAndGradNorms) {
  const std::string fixture = test::fixture_dir("qwen3_moe_lora");
  const nlohmann::json ref = test::read_json(fixture + "/reference.json");
  auto rt = create_runtime(expert_lora_config(fixture));
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_moe_fused");
  EXPECT_LT(max_rel_error(rt->logits(h, batch).to_doubles(), test::fixture_logits("qwen3_moe_lora")), 1e-9);

  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  const ForwardResult r = rt->forward_backward(h, batch);
  EXPECT_LT(rel(r.loss, ref["loss"].get<double>()), 1e-9);
  // peft's norms are of the fused tensors: sum every expert's squares under its peft name.
  const LoraConfig& lora = *h.model().params().lora();
  std::map<std::string, double> sq;
  for (const Parameter& p : h.model().params().params()) {
    if (!p.requires_grad()) continue;
    const std::string name =
        is_expert_lora_param(p.name) ? peft_expert_tensor_name(p.name, lora) : "base_model.model." + p.name;
    sq[name] += ops::sum_squares(p.grad);
  }
  EXPECT_EQ(sq.size(), ref["per_param_grad_norm"].size());
  EXPECT_TRUE(sq.count("base_model.model.model.layers.1.mlp.experts.base_layer.lora_B.weight"));
  double total = 0;
  for (const auto& [name, s] : sq) {
    total += s;
    ASSERT_TRUE(ref["per_param_grad_norm"].contains(name)) << name;
    EXPECT_LT(rel(std::sqrt(s), ref["per_param_grad_norm"][name].get<double>()), 1e-8) << name;
  }
  EXPECT_LT(rel(std::sqrt(total), ref["grad_norm"].get<double>()), 1e-9);
}

TEST(Peft, ExpertAdapterSavesPeftsFusedTensorsBitForBitAndReloads) {
  const std::string fixture = test::fixture_dir("qwen3_moe_lora");
  auto rt = create_runtime(expert_lora_config(fixture));
  ModelHandle h = rt->build_model();
  const std::string dir = temp_dir("experts");
  rt->save_peft_adapter(h, dir);
  const SafetensorsFile saved = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  const SafetensorsFile peft = SafetensorsFile::open(fixture + "/adapter_model.safetensors");
  EXPECT_EQ(saved.names(), peft.names());
  for (const std::string& n : peft.names()) {
    ASSERT_TRUE(saved.has(n)) << n;
    EXPECT_EQ(saved.shape(n), peft.shape(n)) << n;
    EXPECT_EQ(saved.get(n).to_doubles(), peft.get(n).to_doubles()) << n;
  }
  const nlohmann::json config = test::read_json(dir + "/adapter_config.json");
  EXPECT_EQ(config["target_parameters"], nlohmann::json({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}));

  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  rt->forward_backward(h, test::fixture_batch("qwen3_moe_fused"));
  ASSERT_TRUE(rt->optimizer_step(h).update_successful);
  rt->save_peft_adapter(h, dir);
  auto rt2 = create_runtime(expert_lora_config(dir));
  ModelHandle h2 = rt2->build_model();
  EXPECT_EQ(adapter_values(h2), adapter_values(h));
  EXPECT_NE(adapter_values(h2), [&] {
    auto rt3 = create_runtime(expert_lora_config(fixture));
    ModelHandle h3 = rt3->build_model();
    return adapter_values(h3);
  }());
  fs::remove_all(dir);
}

// DeepSeek-V3's routed experts are the same expert module: a fresh adapter
// leaves the logits as they were, one step trains it, and it saves and loads.
TEST(Peft, ExpertAdapterOnDeepseekV3RoutedExpertsTrainsAndReloads) {
  RuntimeConfig cfg = expert_lora_config("");
  cfg.hf_path = test::fixture_dir("deepseek_v3_qproj");
  cfg.backend_cfg.peft.target_modules = "o_proj";
  RuntimeConfig base = cfg;
  base.backend_cfg.peft.type = "none";
  auto rt = create_runtime(cfg), base_rt = create_runtime(base);
  ModelHandle h = rt->build_model(), base_h = base_rt->build_model();
  const PackedBatch batch = test::fixture_batch("deepseek_v3_qproj");
  EXPECT_EQ(rt->logits(h, batch).to_doubles(), base_rt->logits(base_h, batch).to_doubles());
  int expert_adapters = 0;
  for (const Parameter& p : h.model().params().params()) expert_adapters += is_expert_lora_param(p.name);
  EXPECT_GT(expert_adapters, 0);
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  rt->forward_backward(h, batch);
  ASSERT_TRUE(rt->optimizer_step(h).update_successful);
  const std::string dir = temp_dir("dsv3_experts");
  rt->save_peft_adapter(h, dir);
  EXPECT_TRUE(SafetensorsFile::open(dir + "/adapter_model.safetensors")
                  .has("base_model.model.model.layers.1.mlp.experts.base_layer.lora_B.weight"));
  RuntimeConfig again = cfg;
  again.backend_cfg.peft.adapter_path = dir;
  auto rt2 = create_runtime(again);
  ModelHandle h2 = rt2->build_model();
  EXPECT_EQ(adapter_values(h2), adapter_values(h));
  fs::remove_all(dir);
}

TEST(Peft, TrainingCheckpointKeepsTheAdapters) {
  auto rt = create_runtime(lora_config(test::fixture_dir("qwen3_gqa_lora")));
  ModelHandle h = rt->build_model();
  const std::string dir = temp_dir("checkpoint");
  rt->save_checkpoint(h, dir);
  auto rt2 = create_runtime(lora_config());
  ModelHandle h2 = rt2->build_model();
  EXPECT_NE(adapter_values(h2), adapter_values(h));
  rt2->load_checkpoint(h2, dir);
  EXPECT_EQ(adapter_values(h2), adapter_values(h));
  fs::remove_all(dir);
}

// The frozen base weights have no optimizer state: the checkpoint's state/
// holds them under model/ only, and master weights and moments for the adapters.
TEST(Peft, FrozenBaseWeightsAreNotInTheCheckpointsOptimizerState) {
  auto rt = create_runtime(lora_config(test::fixture_dir("qwen3_gqa_lora")));
  ModelHandle h = rt->build_model();
  const std::string dir = temp_dir("checkpoint_frozen");
  rt->save_checkpoint(h, dir);
  const ShardedCheckpoint ck = ShardedCheckpoint::open(dir + "/state");
  size_t adapters = 0;
  for (const Parameter& p : h.model().params().params()) {
    EXPECT_TRUE(ck.has("model/" + p.name)) << p.name;
    const bool trains = p.requires_grad();
    adapters += trains;
    for (const char* part : {"master/", "exp_avg/", "exp_avg_sq/"})
      EXPECT_EQ(ck.has(part + p.name), trains) << part << p.name;
  }
  EXPECT_GT(adapters, 0u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bb
