// Qwen3-MoE router replay through the runtime, float64: a recorded forward's
// experts replayed give the same loss and gradients bit for bit; replaying
// other experts changes the routing; routed_experts of the wrong shape or
// with ids out of range fail with the numbers. Plus the router-loss options
// (Megatron's per-layer form, z-loss, capacity) in ForwardResult's metrics.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

// qwen3_moe_mixed: its MoE layers, top-k and experts from its config.
struct Step {
  ForwardResult result;
  std::vector<std::vector<double>> grads;
};

Step run_step(const PackedBatch& batch, const nlohmann::json& overrides = nlohmann::json::object(),
              int microbatches = 1) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("qwen3_moe_mixed");
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.model_overrides = overrides;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  Step s;
  s.result = rt->forward_backward(h, batch, {}, microbatches);
  for (const Parameter& p : h.model().params().params()) s.grads.push_back(p.grad.to_doubles());
  return s;
}

PackedBatch with_replay(PackedBatch b, const std::string& mode, std::vector<int64_t> ids = {}) {
  b.router_replay = mode;
  b.routed_experts = std::move(ids);
  return b;
}

std::vector<int64_t> recorded(const ForwardResult& r) {
  std::vector<int64_t> all;
  for (const ModelOutputs& o : r.model_output) all.insert(all.end(), o.routed_experts.begin(), o.routed_experts.end());
  return all;
}

TEST(Qwen3MoeRouterReplay, RecordThenReplayIsBitIdentical) {
  const PackedBatch batch = test::fixture_batch("qwen3_moe_mixed");
  for (int microbatches : {1, 2}) {
    const Step plain = run_step(batch, nlohmann::json::object(), microbatches);
    const Step rec = run_step(with_replay(batch, "record"), nlohmann::json::object(), microbatches);
    const std::vector<int64_t> ids = recorded(rec.result);
    ASSERT_FALSE(ids.empty());
    ASSERT_EQ(ids.size() % size_t(batch.total_tokens()), 0u);
    EXPECT_EQ(rec.result.loss, plain.result.loss);
    const Step rep = run_step(with_replay(batch, "replay", ids), nlohmann::json::object(), microbatches);
    EXPECT_EQ(rep.result.loss, rec.result.loss) << microbatches << " microbatches";
    EXPECT_EQ(rep.result.aux_loss, rec.result.aux_loss);
    ASSERT_EQ(rep.grads.size(), rec.grads.size());
    for (size_t i = 0; i < rec.grads.size(); ++i) EXPECT_EQ(rep.grads[i], rec.grads[i]) << "parameter " << i;
  }
}

TEST(Qwen3MoeRouterReplay, ReplayingOtherExpertsChangesTheRouting) {
  const PackedBatch batch = test::fixture_batch("qwen3_moe_mixed");
  const Step rec = run_step(with_replay(batch, "record"));
  std::vector<int64_t> ids = recorded(rec.result);
  // Every token to experts 0 .. k-1 in every MoE layer.
  const int64_t per_token = int64_t(ids.size()) / batch.total_tokens();
  const nlohmann::json hf = test::read_json(test::fixture_dir("qwen3_moe_mixed") + "/config.json");
  const int64_t k = hf["num_experts_per_tok"].get<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i) % per_token % k;
  ASSERT_NE(ids, recorded(rec.result));
  const Step rep = run_step(with_replay(batch, "replay", ids));
  EXPECT_NE(rep.result.loss, rec.result.loss);
  // The load shows the choice: experts 0 .. k-1 take every token, the others none.
  for (const auto& [key, v] : rep.result.metrics)
    if (key.starts_with("expert_load_min.")) EXPECT_EQ(v.front(), 0.0) << key;
  for (const auto& [key, v] : rep.result.metrics)
    if (key.starts_with("expert_load_max.")) EXPECT_EQ(v.front(), double(batch.total_tokens())) << key;
}

void expect_error(const PackedBatch& batch, const std::string& words) {
  try {
    run_step(batch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Qwen3MoeRouterReplay, RejectsRoutedExpertsOfTheWrongShapeOrRange) {
  const PackedBatch batch = test::fixture_batch("qwen3_moe_mixed");
  const std::vector<int64_t> ids = recorded(run_step(with_replay(batch, "record")).result);
  const nlohmann::json hf = test::read_json(test::fixture_dir("qwen3_moe_mixed") + "/config.json");
  const int64_t k = hf["num_experts_per_tok"].get<int64_t>();
  const int64_t experts = hf.contains("num_experts") ? hf["num_experts"].get<int64_t>()
                                                     : hf["num_local_experts"].get<int64_t>();
  const int64_t layers = int64_t(ids.size()) / (batch.total_tokens() * k);
  std::vector<int64_t> short_ids(ids.begin(), ids.end() - 1);
  expect_error(with_replay(batch, "replay", short_ids),
               "routed_experts holds " + std::to_string(ids.size() - 1) + " ids; router replay needs tokens x MoE "
               "layers x top_k = " + std::to_string(batch.total_tokens()) + " x " + std::to_string(layers) + " x " +
               std::to_string(k) + " = " + std::to_string(ids.size()));
  std::vector<int64_t> bad = ids;
  bad[size_t(k)] = experts;   // token 0, MoE layer 1 (or token 1 with one MoE layer)
  expect_error(with_replay(batch, "replay", bad),
               "routed_experts[" + std::to_string(k) + "]");
  expect_error(with_replay(batch, "replay", bad), "= " + std::to_string(experts) + " is outside [0, " +
                                                      std::to_string(experts) + ")");
  expect_error(with_replay(batch, "playback", ids), "router_replay 'playback' is not one of record, replay");
}

TEST(Qwen3MoeRouterLosses, MetricsOfEveryRouterLoss) {
  const PackedBatch batch = test::fixture_batch("qwen3_moe_mixed");
  const Step hf = run_step(batch);
  const Step meg = run_step(batch, {{"moe_aux_loss_type", "megatron"}, {"router_z_loss_coef", 0.01},
                                    {"moe_expert_capacity_factor", 0.5}},
                            2);
  EXPECT_FALSE(hf.result.metrics.count("z_loss"));
  ASSERT_EQ(meg.result.metrics.at("z_loss").size(), 2u);
  EXPECT_GT(meg.result.metrics.at("z_loss")[0], 0.0);
  ASSERT_EQ(meg.result.metrics.at("aux_loss").size(), 2u);
  ASSERT_EQ(meg.result.metrics.at("dropped_tokens").size(), 2u);
  EXPECT_GT(meg.result.metrics.at("dropped_tokens")[0] + meg.result.metrics.at("dropped_tokens")[1], 0.0);
  EXPECT_EQ(hf.result.metrics.at("dropped_tokens")[0], 0.0);
  bool load = false;
  for (const auto& [key, v] : meg.result.metrics) load = load || key.starts_with("expert_load_max.");
  EXPECT_TRUE(load);
  EXPECT_NE(meg.result.aux_loss, hf.result.aux_loss);
}

}  // namespace
}  // namespace bb
