// RouterAuxLoss: accumulation over layers, value and gradient.
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

#include "bumblebee/core/error.h"

namespace bb {

void RouterAuxLoss::add_layer(const std::vector<double>& q, const std::vector<int64_t>& chosen, int64_t tokens,
                              int64_t num_experts) {
  if (finished_) return;
  if (counts_.empty()) counts_.assign(size_t(num_experts), 0.0), q_sums_.assign(size_t(num_experts), 0.0);
  BB_CHECK(int64_t(counts_.size()) == num_experts, "router aux loss: a layer with ", num_experts,
           " experts after layers with ", counts_.size());
  BB_CHECK(int64_t(q.size()) == tokens * num_experts, "router aux loss: ", q.size(), " scores for ", tokens,
           " tokens x ", num_experts, " experts");
  for (int64_t e : chosen) counts_[size_t(e)] += 1.0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < num_experts; ++e) q_sums_[size_t(e)] += q[size_t(t * num_experts + e)];
  rows_ += tokens;
}

double RouterAuxLoss::value() const {
  if (rows_ == 0) return 0.0;
  const double n = double(rows_);
  double s = 0;
  for (size_t e = 0; e < counts_.size(); ++e) s += (counts_[e] / n) * (q_sums_[e] / n);
  return double(counts_.size()) * s;
}

std::vector<double> RouterAuxLoss::expert_grad() const {
  BB_CHECK(finished_, "router aux loss: gradient asked before the forward finished");
  std::vector<double> g(counts_.size(), 0.0);
  const double n = double(rows_);
  for (size_t e = 0; e < counts_.size(); ++e) g[e] = grad_scale_ * double(counts_.size()) * counts_[e] / (n * n);
  return g;
}

}  // namespace bb
