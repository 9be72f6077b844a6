// ExpertBiasUpdate: the step's expert loads and the sign update of the expert biases.
#include "bumblebee/primitive/modules/moe/expert_bias_update.h"

#include "bumblebee/core/error.h"

namespace bb {

ExpertBiasUpdate::ExpertBiasUpdate(double rate, dist::Communicator& dp) : rate_(rate), dp_(&dp) {
  BB_CHECK(rate > 0, "moe_router_bias_update_rate must be > 0 to update expert biases, got ", rate);
}

size_t ExpertBiasUpdate::add_layer(Parameter& bias) {
  BB_CHECK(bias.full_shape.size() == 1, "expert bias '", bias.name, "' must be [num_experts], got ",
           shape_str(bias.full_shape));
  biases_.push_back(&bias);
  loads_.emplace_back(size_t(bias.full_shape[0]), 0.0);
  master_.emplace_back();
  written_.emplace_back();
  return biases_.size() - 1;
}

void ExpertBiasUpdate::add_load(size_t index, const std::vector<int64_t>& rows_per_expert) {
  std::vector<double>& load = loads_.at(index);
  BB_CHECK(rows_per_expert.size() == load.size(), "expert bias '", biases_[index]->name, "': ",
           rows_per_expert.size(), " expert counts for ", load.size(), " experts");
  for (size_t e = 0; e < load.size(); ++e) load[e] += double(rows_per_expert[e]);
}

std::vector<double> expert_bias_step(const std::vector<double>& load, double rate) {
  double total = 0;
  for (double l : load) total += l;
  const double mean = load.empty() ? 0.0 : total / double(load.size());
  std::vector<double> step(load.size());
  for (size_t e = 0; e < load.size(); ++e) step[e] = mean > load[e] ? rate : mean < load[e] ? -rate : 0.0;
  return step;
}

void ExpertBiasUpdate::update() {
  for (size_t i = 0; i < biases_.size(); ++i) {
    std::vector<double>& load = loads_[i];
    // Counts are exact integers in float64, so the sum is the same on every rank.
    Parameter& bias = *biases_[i];
    Tensor global = Tensor::from_doubles(load, {int64_t(load.size())}, DType::F64).to(bias.value.device());
    if (dp_->size() > 1) dp_->all_reduce(global);
    const std::vector<double> step = expert_bias_step(global.to_doubles(), rate_);
    const std::vector<double> current = bias.value.to_doubles();
    if (current != written_[i]) master_[i] = current;
    std::vector<double>& b = master_[i];
    for (size_t e = 0; e < b.size(); ++e) b[e] += step[e];
    bias.value.copy_from(Tensor::from_doubles(b, bias.value.shape(), DType::F64));
    written_[i] = bias.value.to_doubles();
    std::fill(load.begin(), load.end(), 0.0);
  }
}

}  // namespace bb
