// Auxiliary-loss-free balancing on the tiny qwen3_moe_mixed fixture, float64:
// after each optimizer step every MoE layer's expert bias moves by exactly
// +-moe_router_bias_update_rate (0 where an expert's load equals the mean),
// the loads counted from the step's routing (recorded by router replay) over
// both microbatches; the bias survives a training checkpoint; rate 0 declares
// no bias and a negative rate is an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

constexpr double kRate = 1e-3;

RuntimeConfig moe_config(double rate) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("qwen3_moe_mixed");
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.model_overrides = {{"moe_router_bias_update_rate", rate}};
  return cfg;
}

bool is_expert_bias(const Parameter& p) { return p.name.ends_with(".mlp.gate.e_score_correction_bias"); }

// Every MoE layer's bias, in layer order.
std::vector<std::vector<double>> biases(ModelHandle& h) {
  std::vector<std::vector<double>> out;
  for (const Parameter& p : h.model().params().params())
    if (is_expert_bias(p)) out.push_back(p.value.to_doubles());
  return out;
}

// Tokens per expert of each MoE layer, from the recorded routing of every microbatch.
std::vector<std::vector<double>> loads(const ForwardResult& r, size_t layers, int64_t k, int64_t experts) {
  std::vector<std::vector<double>> load(layers, std::vector<double>(size_t(experts), 0.0));
  for (const ModelOutputs& o : r.model_output) {
    const size_t tokens = o.routed_experts.size() / (layers * size_t(k));
    for (size_t t = 0; t < tokens; ++t)
      for (size_t l = 0; l < layers; ++l)
        for (int64_t j = 0; j < k; ++j) load[l][size_t(o.routed_experts[(t * layers + l) * size_t(k) + size_t(j)])] += 1;
  }
  return load;
}

PackedBatch recording(PackedBatch b) {
  b.router_replay = "record";
  return b;
}

TEST(Qwen3MoeBiasUpdate, EachStepMovesEveryBiasByTheRate) {
  const nlohmann::json hf = test::read_json(test::fixture_dir("qwen3_moe_mixed") + "/config.json");
  const int64_t k = hf["num_experts_per_tok"].get<int64_t>(), experts = hf["num_local_experts"].get<int64_t>();
  auto rt = create_runtime(moe_config(kRate));
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  const PackedBatch batch = recording(test::fixture_batch("qwen3_moe_mixed"));
  std::vector<std::vector<double>> before = biases(h);
  ASSERT_EQ(before.size(), 2u);   // layer 0 is dense
  for (const auto& b : before) EXPECT_EQ(b, std::vector<double>(size_t(experts), 0.0));
  int moved = 0, held = 0;
  for (int step = 0; step < 2; ++step) {
    rt->zero_grad(h);
    const ForwardResult r = rt->forward_backward(h, batch, {}, 2);
    ASSERT_EQ(r.model_output.size(), 2u);
    const std::vector<std::vector<double>> load = loads(r, before.size(), k, experts);
    rt->optimizer_step(h);
    const std::vector<std::vector<double>> after = biases(h);
    for (size_t l = 0; l < after.size(); ++l) {
      double total = 0;
      for (double c : load[l]) total += c;
      EXPECT_EQ(total, double(batch.total_tokens() * k)) << "layer " << l;
      for (size_t e = 0; e < after[l].size(); ++e) {
        const double mean = total / double(experts);
        const double expected = before[l][e] + (load[l][e] < mean ? kRate : load[l][e] > mean ? -kRate : 0.0);
        EXPECT_EQ(after[l][e], expected) << "step " << step << " MoE layer " << l << " expert " << e;
        (load[l][e] == mean ? held : moved) += 1;
      }
    }
    before = after;
  }
  EXPECT_GT(moved, 0);
}

TEST(Qwen3MoeBiasUpdate, CheckpointResumeKeepsTheBias) {
  const std::string dir = "/tmp/bb_moe_bias_ckpt_" + std::to_string(::getpid());
  std::vector<std::vector<double>> saved;
  {
    auto rt = create_runtime(moe_config(kRate));
    ModelHandle h = rt->build_model();
    auto train = rt->train_mode(h);
    rt->zero_grad(h);
    rt->forward_backward(h, test::fixture_batch("qwen3_moe_mixed"), {}, 1);
    rt->optimizer_step(h);
    saved = biases(h);
    rt->save_checkpoint(h, dir);
  }
  bool nonzero = false;
  for (const auto& b : saved)
    for (double v : b) nonzero = nonzero || v != 0.0;
  EXPECT_TRUE(nonzero);
  {
    auto rt = create_runtime(moe_config(kRate));
    ModelHandle h = rt->build_model();
    rt->load_checkpoint(h, dir);
    EXPECT_EQ(biases(h), saved);
  }
  std::filesystem::remove_all(dir);
}

TEST(Qwen3MoeBiasUpdate, RateZeroHasNoBiasAndANegativeRateIsAnError) {
  auto rt = create_runtime(moe_config(0.0));
  ModelHandle h = rt->build_model();
  EXPECT_TRUE(biases(h).empty());
  try {
    create_runtime(moe_config(-1e-3))->build_model();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_router_bias_update_rate must be >= 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
