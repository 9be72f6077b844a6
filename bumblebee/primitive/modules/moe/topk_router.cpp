// TopKRouter forward (softmax, top-k, renormalisation) and backward.
#include "bumblebee/primitive/modules/moe/topk_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bumblebee/primitive/modules/linear.h"

namespace bb {

TopKRouter::TopKRouter(ParamStore& store, const std::string& name, const TopKRouterConfig& cfg)
    : cfg_(cfg), weight_(&store.add(name, {cfg.num_experts, cfg.hidden}, {ShardKind::Replicated, 0, 1})) {
  BB_CHECK(cfg.top_k >= 1 && cfg.top_k <= cfg.num_experts, "num_experts_per_tok ", cfg.top_k,
           " must lie in [1, num_experts = ", cfg.num_experts, "]");
}

Routing TopKRouter::forward(const Tensor& x) const {
  const int64_t e_count = cfg_.num_experts, k = cfg_.top_k;
  Routing r;
  r.tokens = x.size(0);
  r.num_experts = e_count;
  r.top_k = k;
  r.probs = linear_forward(x, weight_->value).to_doubles();
  r.experts.resize(size_t(r.tokens * k));
  r.weights.resize(size_t(r.tokens * k));
  std::vector<int64_t> order(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < r.tokens; ++t) {
    double* p = r.probs.data() + t * e_count;
    const double m = *std::max_element(p, p + e_count);
    double z = 0;
    for (int64_t e = 0; e < e_count; ++e) z += (p[e] = std::exp(p[e] - m));
    for (int64_t e = 0; e < e_count; ++e) p[e] /= z;
    BB_CHECK(std::isfinite(z), "router: non-finite logits for token ", t);
    // Most probable first; equal probabilities keep the lower expert id first.
    std::iota(order.begin(), order.end(), int64_t(0));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += p[order[size_t(j)]];
    for (int64_t j = 0; j < k; ++j) {
      r.experts[size_t(t * k + j)] = order[size_t(j)];
      r.weights[size_t(t * k + j)] = p[order[size_t(j)]] / (cfg_.norm_topk_prob ? sum : 1.0);
    }
  }
  return r;
}

void TopKRouter::backward(const Routing& r, const std::vector<double>& d_weights, const std::vector<double>& d_probs,
                          const Tensor& x, Tensor& dx) const {
  const int64_t e_count = r.num_experts, k = r.top_k;
  std::vector<double> dlogits(size_t(r.tokens * e_count), 0.0);
  std::vector<double> dp(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < r.tokens; ++t) {
    const double* p = r.probs.data() + t * e_count;
    const double* dw = d_weights.data() + t * k;
    if (d_probs.empty()) std::fill(dp.begin(), dp.end(), 0.0);
    else std::copy(d_probs.begin() + t * e_count, d_probs.begin() + (t + 1) * e_count, dp.begin());
    // w_j = p_j / S with S the sum of the chosen p: dp_j = (dw_j - sum_i dw_i w_i) / S.
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      sum += p[r.experts[size_t(t * k + j)]];
      dot += dw[j] * r.weights[size_t(t * k + j)];
    }
    for (int64_t j = 0; j < k; ++j)
      dp[size_t(r.experts[size_t(t * k + j)])] += cfg_.norm_topk_prob ? (dw[j] - dot) / sum : dw[j];
    // Softmax: dlogit_e = p_e (dp_e - sum_f p_f dp_f).
    double pdp = 0;
    for (int64_t e = 0; e < e_count; ++e) pdp += p[e] * dp[size_t(e)];
    for (int64_t e = 0; e < e_count; ++e) dlogits[size_t(t * e_count + e)] = p[e] * (dp[size_t(e)] - pdp);
  }
  const Tensor dl = Tensor::from_doubles(dlogits, {r.tokens, e_count}, x.dtype()).to(x.device());
  linear_backward(dl, x, weight_->value, weight_->grad, dx, true);
}

}  // namespace bb
