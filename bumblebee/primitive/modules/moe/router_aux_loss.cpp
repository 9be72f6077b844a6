// RouterAuxLoss: accumulation over layers, values and gradients.
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

#include <algorithm>

#include "bumblebee/core/error.h"
#include "bumblebee/ops/ops.h"

namespace bb {

AuxLossType parse_aux_loss_type(const std::string& name) {
  if (name == "hf") return AuxLossType::Hf;
  if (name == "megatron") return AuxLossType::Megatron;
  BB_FAIL("moe_aux_loss_type '", name, "' is not one of hf, megatron");
}

const char* aux_loss_type_name(AuxLossType t) { return t == AuxLossType::Hf ? "hf" : "megatron"; }

RouterAuxLoss::RouterAuxLoss(double grad_scale) : RouterAuxLoss({true, AuxLossType::Hf, grad_scale, 0.0}, 1.0) {}

RouterAuxLoss::RouterAuxLoss(const RouterLossConfig& cfg, double microbatch_weight)
    : cfg_(cfg), weight_(microbatch_weight) {}

namespace {
std::vector<double> score_sums(const Tensor& q, int64_t num_experts) {
  BB_CHECK(q.dim() == 2 && q.size(1) == num_experts, "router aux loss: scores of shape ", shape_str(q.shape()),
           " for ", num_experts, " experts");
  Tensor sums = Tensor::empty({num_experts}, q.dtype(), q.device());
  ops::moe_score_sums(q, sums);
  return sums.to_doubles();
}

int64_t total(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t c : v) s += c;
  return s;
}
}  // namespace

void RouterAuxLoss::add_layer(const Tensor& q, const std::vector<int64_t>& rows_per_expert) {
  if (finished_ || !cfg_.aux) return;
  const int64_t num_experts = int64_t(rows_per_expert.size());
  const std::vector<double> s = score_sums(q, num_experts);
  ++layers_;
  if (cfg_.aux_type == AuxLossType::Megatron) {
    const double tokens = double(q.size(0)), rows = double(total(rows_per_expert));   // rows = k T
    if (rows == 0) return;
    double dot = 0;
    for (int64_t e = 0; e < num_experts; ++e) dot += double(rows_per_expert[size_t(e)]) * s[size_t(e)];
    megatron_ += double(num_experts) * dot / (rows * tokens);
    return;
  }
  if (counts_.empty()) counts_.assign(size_t(num_experts), 0.0), q_sums_.assign(size_t(num_experts), 0.0);
  BB_CHECK(int64_t(counts_.size()) == num_experts, "router aux loss: a layer with ", num_experts,
           " experts after layers with ", counts_.size());
  for (int64_t e = 0; e < num_experts; ++e) {
    counts_[size_t(e)] += double(rows_per_expert[size_t(e)]);
    q_sums_[size_t(e)] += s[size_t(e)];
  }
  rows_ += q.size(0);
}

void RouterAuxLoss::add_z_loss(double layer_z) {
  if (!finished_) z_ += layer_z;
}

void RouterAuxLoss::add_load(int64_t layer, const std::vector<int64_t>& rows_per_expert, int64_t dropped_rows) {
  if (finished_ || rows_per_expert.empty()) return;
  const auto [lo, hi] = std::minmax_element(rows_per_expert.begin(), rows_per_expert.end());
  loads_.push_back({layer, *lo, *hi, dropped_rows});
}

double RouterAuxLoss::value() const {
  if (cfg_.aux_type == AuxLossType::Megatron) return megatron_;
  if (rows_ == 0) return 0.0;
  const double n = double(rows_);
  double s = 0;
  for (size_t e = 0; e < counts_.size(); ++e) s += (counts_[e] / n) * (q_sums_[e] / n);
  return double(counts_.size()) * s;
}

std::vector<double> RouterAuxLoss::expert_grad() const {
  BB_CHECK(finished_, "router aux loss: gradient asked before the forward finished");
  BB_CHECK(cfg_.aux_type == AuxLossType::Hf, "router aux loss: the all-layer gradient is the hf form's");
  std::vector<double> g(counts_.size(), 0.0);
  const double n = double(rows_);
  for (size_t e = 0; e < counts_.size(); ++e) g[e] = grad_scale() * double(counts_.size()) * counts_[e] / (n * n);
  return g;
}

std::vector<double> RouterAuxLoss::expert_grad(const std::vector<int64_t>& rows_per_expert, int64_t tokens) const {
  if (cfg_.aux_type == AuxLossType::Hf) return expert_grad();
  const double num_experts = double(rows_per_expert.size()), rows = double(total(rows_per_expert));
  std::vector<double> g(rows_per_expert.size(), 0.0);
  if (rows == 0 || tokens == 0) return g;
  for (size_t e = 0; e < g.size(); ++e)
    g[e] = grad_scale() * num_experts * double(rows_per_expert[e]) / (rows * double(tokens));
  return g;
}

}  // namespace bb
