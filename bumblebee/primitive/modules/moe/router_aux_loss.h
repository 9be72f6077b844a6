// RouterAuxLoss: the load-balancing auxiliary loss of one microbatch, summed
// over every MoE layer of a chunk, exactly as HF transformers'
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
// A Recompute re-running a block's forward inside backward adds nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"

namespace bb {

class RouterAuxLoss {
 public:
  // `grad_scale`: what the loss adds per unit of aux (router_aux_loss_coef x
  // this microbatch's share of the step, see docs/models.md).
  explicit RouterAuxLoss(double grad_scale) : grad_scale_(grad_scale) {}
  double grad_scale() const { return grad_scale_; }
  // One layer's router output: q [T, E] on the device (its per-expert sums,
  // ops::moe_score_sums, are the only values read back) and the rows routed
  // to each expert [E] (on the host). Ignored once finished.
  void add_layer(const Tensor& q, const std::vector<int64_t>& rows_per_expert);
  // Ends the forward: value() and expert_grad() are final from here on.
  void finish() { finished_ = true; }
  bool finished() const { return finished_; }
  bool empty() const { return rows_ == 0; }
  double value() const;
  // d(grad_scale * aux) / d q[t, e], the same for every token and layer: [E].
  std::vector<double> expert_grad() const;

 private:
  double grad_scale_;
  bool finished_ = false;
  int64_t rows_ = 0;                 // N: (token, layer) pairs
  std::vector<double> counts_, q_sums_;   // [E]
};

}  // namespace bb
