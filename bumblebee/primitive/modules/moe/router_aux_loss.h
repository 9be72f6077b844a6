// RouterAuxLoss: the router losses and statistics of one microbatch over the
// MoE layers of a chunk: the load-balancing auxiliary loss in one of two
// forms, the router z-loss, and each layer's expert load.
//
// HF form (AuxLossType::Hf), exactly as HF transformers'
// load_balancing_loss_func computes it (Switch Transformer's loss over the
// router outputs of all layers at once):
//
//   aux = E * sum_e f_e * P_e,  f_e = (rows routed to e) / N,  P_e = (sum of q_e) / N
//
// over all N = layers x tokens (token, layer) pairs, where q are the router
// probabilities (softmax of the logits) and a row is one of a token's k
// choices (no division by k). Layers couple through f and P, so the MoE
// blocks record their sums here in forward; the chunk finishes the
// accumulator after its forward, and each block's backward then takes the
// gradient with respect to its own scores through P only (f is a count):
//   d(scale * aux) / d q[t, e] = scale * E * count_e / N^2.
//
// Megatron form (AuxLossType::Megatron, Megatron-core's
// switch_load_balancing_loss_func), per layer over its T tokens and k choices:
//   aux_l = E / (k T^2) * sum_e count_e * (sum_t q[t, e]),
// the loss adds coeff x sum_l aux_l and `value()` is sum_l aux_l. Layers do
// not couple, so a pipeline stage's value is its own layers' and the step's
// is the sum over stages. Gradient: d(scale * aux_l) / d q[t, e] =
// scale * E * count_e / (k T^2).
//
// Router z-loss (ST-MoE), per layer: z_l = mean over tokens of
// logsumexp(logits)^2; the loss adds z_coeff x sum_l z_l, `z_value()` is sum_l z_l.
//
// A Recompute re-running a block's forward inside backward adds nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"

namespace bb {

enum class AuxLossType { Hf, Megatron };
// "hf" | "megatron"; anything else is an error naming the value.
AuxLossType parse_aux_loss_type(const std::string& name);
const char* aux_loss_type_name(AuxLossType t);

struct RouterLossConfig {
  bool aux = false;                       // the load-balancing loss is on
  AuxLossType aux_type = AuxLossType::Hf;
  double aux_coeff = 0.0;                 // router_aux_loss_coef
  double z_coeff = 0.0;                   // router_z_loss_coef (0: no z-loss)
};

class RouterAuxLoss {
 public:
  // The HF form alone; `grad_scale`: what the loss adds per unit of aux
  // (router_aux_loss_coef x this microbatch's share of the step, see docs/models.md).
  explicit RouterAuxLoss(double grad_scale);
  // `microbatch_weight`: this microbatch's share of the step; each loss adds
  // its coefficient x that weight x its value.
  RouterAuxLoss(const RouterLossConfig& cfg, double microbatch_weight);
  const RouterLossConfig& config() const { return cfg_; }
  double grad_scale() const { return cfg_.aux ? cfg_.aux_coeff * weight_ : 0.0; }
  double z_grad_scale() const { return cfg_.z_coeff * weight_; }

  // One layer's router output: q [T, E] on the device (its per-expert sums,
  // ops::moe_score_sums, are the only values read back) and the rows routed
  // to each expert [E] (on the host, before any capacity drop). Ignored once
  // finished or when the aux loss is off.
  void add_layer(const Tensor& q, const std::vector<int64_t>& rows_per_expert);
  // One layer's z-loss (mean over tokens of logsumexp^2).
  void add_z_loss(double layer_z);
  // One layer's load: rows per expert after routing, rows dropped by the capacity.
  void add_load(int64_t layer, const std::vector<int64_t>& rows_per_expert, int64_t dropped_rows);

  // Ends the forward: value() and the gradients are final from here on.
  void finish() { finished_ = true; }
  bool finished() const { return finished_; }
  bool empty() const { return rows_ == 0 && layers_ == 0; }
  double value() const;
  double z_value() const { return z_; }
  // What the chunk's backward adds to the objective.
  double loss() const { return grad_scale() * value() + z_grad_scale() * z_value(); }
  // d(grad_scale * aux) / d q[t, e] for a layer with `rows_per_expert` over
  // `tokens` tokens, the same for every token: [E]. The HF form's depends on
  // every layer (the layer's own counts are not used).
  std::vector<double> expert_grad(const std::vector<int64_t>& rows_per_expert, int64_t tokens) const;
  std::vector<double> expert_grad() const;   // the HF form's

  struct Load {
    int64_t layer = 0, min_rows = 0, max_rows = 0, dropped_rows = 0;
  };
  const std::vector<Load>& loads() const { return loads_; }

 private:
  RouterLossConfig cfg_;
  double weight_ = 1.0;
  bool finished_ = false;
  int64_t rows_ = 0;                      // HF: N, (token, layer) pairs
  std::vector<double> counts_, q_sums_;   // HF: [E]
  int64_t layers_ = 0;
  double megatron_ = 0.0, z_ = 0.0;
  std::vector<Load> loads_;
};

}  // namespace bb
