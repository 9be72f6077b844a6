// A loss_fn over per-token log-probs and entropies (an entropy bonus): the
// runtime's entropy equals -sum p log p of the full-vocabulary logits at the
// temperature, and the gradients it backpropagates through both outputs
// match float64 central finite differences of that loss over the parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/core/rng.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

constexpr double kTemperature = 0.8;

std::unique_ptr<Runtime> ref_runtime() {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("qwen3_tp");
  cfg.backend_cfg.temperature = kTemperature;
  return create_runtime(cfg);
}

TEST(EntropyLoss, EntropyIsThatOfTheFullSoftmax) {
  auto rt = ref_runtime();
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_tp");
  const Tensor logits = rt->logits(h, batch);   // already divided by the temperature
  const ForwardResult r = rt->forward_backward(h, batch, {}, 1, /*forward_only=*/true, /*calculate_entropy=*/true);
  const std::vector<double>& ent = r.model_output[0].entropy;
  ASSERT_EQ(int64_t(ent.size()), batch.total_tokens());
  const std::vector<double> l = logits.to_doubles();
  const int64_t V = logits.size(1);
  int64_t t = 0;
  for (int64_t len : batch.seq_lens) {
    for (int64_t i = 0; i < len; ++i, ++t) {
      if (i + 1 == len) {
        EXPECT_EQ(ent[size_t(t)], 0.0);
        continue;
      }
      double m = -INFINITY, s = 0, h_direct = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, l[size_t(t * V + v)]);
      for (int64_t v = 0; v < V; ++v) s += std::exp(l[size_t(t * V + v)] - m);
      for (int64_t v = 0; v < V; ++v) {
        const double logp = l[size_t(t * V + v)] - m - std::log(s);
        h_direct -= std::exp(logp) * logp;
      }
      EXPECT_NEAR(ent[size_t(t)], h_direct, 1e-12 * h_direct) << "token " << t;
    }
  }
}

TEST(EntropyLoss, GradientsThroughLogProbsAndEntropyMatchFiniteDifferences) {
  auto rt = ref_runtime();
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_tp");
  Generator gen(23);
  std::vector<double> wl(size_t(batch.total_tokens())), we(wl.size());
  for (size_t i = 0; i < wl.size(); ++i) {
    wl[i] = gen.normal();
    we[i] = gen.normal();
  }
  // loss = sum_t wl_t log p_t + we_t H_t over one microbatch (the whole batch).
  LossFn fn = [&](const ModelOutputs& out, const PackedBatch&) {
    LossOutput lo;
    for (size_t t = 0; t < out.log_probs.size(); ++t) lo.loss += wl[t] * out.log_probs[t] + we[t] * out.entropy[t];
    lo.grad_log_probs = wl;
    lo.grad_entropy = we;
    return lo;
  };
  auto value = [&] { return rt->forward_backward(h, batch, fn, 1, true, true).loss; };
  {
    auto train = rt->train_mode(h);
    rt->zero_grad(h);
    rt->forward_backward(h, batch, fn, 1, false, true);
  }
  // A few elements of every parameter, against central differences.
  for (Parameter& p : h.model().params().params()) {
    double* x = p.value.data<double>();
    const std::vector<double> grad = p.grad.to_doubles();
    for (int64_t k : {int64_t(0), p.value.numel() / 2, p.value.numel() - 1}) {
      const double saved = x[k], step = 1e-5;
      x[k] = saved + step;
      const double up = value();
      x[k] = saved - step;
      const double down = value();
      x[k] = saved;
      const double numeric = (up - down) / (2 * step);
      EXPECT_NEAR(grad[size_t(k)], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << p.name << "[" << k << "]";
    }
  }
}

TEST(EntropyLoss, EntropyGradientWithoutCalculateEntropyIsAnError) {
  auto rt = ref_runtime();
  ModelHandle h = rt->build_model();
  const PackedBatch batch = test::fixture_batch("qwen3_tp");
  LossFn fn = [&](const ModelOutputs& out, const PackedBatch&) {
    LossOutput lo;
    lo.grad_log_probs.assign(out.log_probs.size(), 0.0);
    lo.grad_entropy.assign(out.log_probs.size(), 1.0);
    return lo;
  };
  auto train = rt->train_mode(h);
  try {
    rt->forward_backward(h, batch, fn);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("calculate_entropy"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
