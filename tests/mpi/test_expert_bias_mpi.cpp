// Auxiliary-loss-free balancing under mpirun (qwen3_moe_mixed, float64): over
// two steps at dp = world and at tp = 2 x dp = world / 2, every MoE layer's
// expert bias moves by +-rate per expert exactly as the rule over the global
// batch's loads says (the tokens each dp rank routed, summed over dp and
// counted once per tp group), which is what one rank does on the whole
// batch; the biases agree on every rank.
#include <gtest/gtest.h>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/mpi/mpi_test_support.h"

namespace bb {
namespace {

constexpr double kRate = 1e-3;

// Each dp rank's own sequences; even token counts, so tp = 2 adds no padding token.
PackedBatch shard(int dp_rank) {
  PackedBatch b;
  b.seq_lens = {6, 8};
  for (int i = 0; i < 14; ++i) b.input_ids.push_back((i * 29 + dp_rank * 13 + 3) % 89);
  b.router_replay = "record";
  return b;
}

std::vector<std::vector<double>> biases(ModelHandle& h) {
  std::vector<std::vector<double>> out;
  for (const Parameter& p : h.model().params().params())
    if (p.name.ends_with(".mlp.gate.e_score_correction_bias")) out.push_back(p.value.to_doubles());
  return out;
}

void run_layout(int tp) {
  dist::Communicator& world = test::world_comm();
  if (world.size() % tp != 0 || world.size() / tp < 2) return;
  SCOPED_TRACE("tp " + std::to_string(tp) + " dp " + std::to_string(world.size() / tp));
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_moe_mixed";
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.parallel.tp = tp;
  cfg.backend_cfg.model_overrides = {{"moe_router_bias_update_rate", kRate}};
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  const nlohmann::json& mc = h.config();
  const int64_t k = mc.at("num_experts_per_tok").get<int64_t>(), experts = mc.at("num_experts").get<int64_t>();
  std::vector<std::vector<double>> before = biases(h);
  ASSERT_EQ(before.size(), 2u);
  const size_t layers = before.size();
  for (int step = 0; step < 2; ++step) {
    rt->zero_grad(h);
    const ForwardResult r = rt->forward_backward(h, shard(h.dp_rank()), {}, 1);
    Tensor load = Tensor::zeros({int64_t(layers), experts}, DType::F64, Device::cpu());
    double* lp = load.data<double>();
    for (const ModelOutputs& o : r.model_output)
      for (size_t i = 0; i < o.routed_experts.size(); ++i)
        lp[((i / size_t(k)) % layers) * size_t(experts) + size_t(o.routed_experts[i])] += 1;
    h.dp_group().all_reduce(load);
    rt->optimizer_step(h);
    const std::vector<std::vector<double>> after = biases(h);
    for (size_t l = 0; l < layers; ++l) {
      double total = 0;
      for (int64_t e = 0; e < experts; ++e) total += lp[l * size_t(experts) + size_t(e)];
      EXPECT_EQ(total, 14.0 * double(h.dp_size() * k)) << "global rows of MoE layer " << l;
      const double mean = total / double(experts);
      for (int64_t e = 0; e < experts; ++e) {
        const double c = lp[l * size_t(experts) + size_t(e)];
        EXPECT_EQ(after[l][size_t(e)], before[l][size_t(e)] + (c < mean ? kRate : c > mean ? -kRate : 0.0))
            << "step " << step << " MoE layer " << l << " expert " << e;
        const double v = after[l][size_t(e)];
        EXPECT_EQ(world.all_reduce_scalar(v, dist::ReduceOp::Max), -world.all_reduce_scalar(-v, dist::ReduceOp::Max));
      }
    }
    before = after;
  }
}

TEST(ExpertBiasMpi, UpdateCountsTheGlobalBatchAtEveryDpAndTp) {
  run_layout(1);
  run_layout(2);
}

}  // namespace
}  // namespace bb
