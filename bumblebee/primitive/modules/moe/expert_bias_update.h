// ExpertBiasUpdate: auxiliary-loss-free load balancing (DeepSeek-V3; Megatron's
// moe_router_bias_update_rate). Every MoE layer of a chunk has an expert bias
// `mlp.gate.e_score_correction_bias` [E] that steers the top-k choice only
// (never the routing weights). The layers report the tokens each expert got
// in every trained microbatch; after the optimizer step, with load_e those
// counts summed over the step's microbatches and over the data-parallel (and
// context-parallel) ranks, each bias moves by a fixed step towards balance,
// as Megatron's get_updated_expert_bias does:
//   bias_e += rate * sign(mean_e' load_e' - load_e)
// (0 where an expert's load equals the mean). The counts are taken from the
// tp group's gathered tokens, which every tp rank routes alike, so they are
// counted once per tp group and never summed over tp. The biases are kept
// here in float64 (Megatron keeps them in fp32) so that a bfloat16 parameter
// does not swallow steps below its spacing; the parameter gets the rounded
// value, and a value put there from outside (a loaded checkpoint) re-seeds
// the float64 copy.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

class ExpertBiasUpdate {
 public:
  // `dp`: the ranks holding other tokens of the step (dp x cp).
  ExpertBiasUpdate(double rate, dist::Communicator& dp);
  double rate() const { return rate_; }
  // Registers a MoE layer's bias [E]; returns the layer's index here.
  size_t add_layer(Parameter& bias);
  // Adds one microbatch's tokens per expert of layer `index`.
  void add_load(size_t index, const std::vector<int64_t>& rows_per_expert);
  // The step's loads of layer `index` on this rank so far.
  const std::vector<double>& load(size_t index) const { return loads_.at(index); }
  // Sums the loads over dp, updates every bias and starts the next step's counts.
  void update();

 private:
  double rate_;
  dist::Communicator* dp_;
  std::vector<Parameter*> biases_;
  std::vector<std::vector<double>> loads_;
  std::vector<std::vector<double>> master_, written_;   // float64 biases; what was last written to the parameter
};

// One layer's rule on the step's global loads: rate * sign(mean - load_e) per expert.
std::vector<double> expert_bias_step(const std::vector<double>& load, double rate);

}  // namespace bb
