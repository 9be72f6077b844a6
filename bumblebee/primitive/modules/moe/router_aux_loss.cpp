// RouterAuxLoss: accumulation over layers, value and gradient.
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

#include "bumblebee/core/error.h"
#include "bumblebee/ops/ops.h"

namespace bb {

void RouterAuxLoss::add_layer(const Tensor& q, const std::vector<int64_t>& rows_per_expert) {
  if (finished_) return;
  const int64_t num_experts = int64_t(rows_per_expert.size());
  if (counts_.empty()) counts_.assign(size_t(num_experts), 0.0), q_sums_.assign(size_t(num_experts), 0.0);
  BB_CHECK(int64_t(counts_.size()) == num_experts, "router aux loss: a layer with ", num_experts,
           " experts after layers with ", counts_.size());
  BB_CHECK(q.dim() == 2 && q.size(1) == num_experts, "router aux loss: scores of shape ", shape_str(q.shape()),
           " for ", num_experts, " experts");
  Tensor sums = Tensor::empty({num_experts}, q.dtype(), q.device());
  ops::moe_score_sums(q, sums);
  const std::vector<double> s = sums.to_doubles();
  for (int64_t e = 0; e < num_experts; ++e) {
    counts_[size_t(e)] += double(rows_per_expert[size_t(e)]);
    q_sums_[size_t(e)] += s[size_t(e)];
  }
  rows_ += q.size(0);
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
