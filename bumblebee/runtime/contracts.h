// Data contracts of the runtime API: ModelOutputs, ForwardResult, loss
// functions and the optimizer step result.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/runtime/packed_batch.h"

namespace bb {

// What one microbatch produced, on the host, for the tokens of that microbatch
// (unshifted positions; the last token of each sequence has no entry value 0).
struct ModelOutputs {
  double loss = 0.0;                 // this microbatch's loss as the loss function defined it
  std::vector<double> log_probs;     // [T] log p(next token | prefix) per position
  std::vector<double> token_loss;    // [T] -log_probs, masked positions 0
  // calculate_entropy: [T] entropy of the softmax at the temperature per
  // position (0 at each sequence's last position, like log_probs). Else empty.
  std::vector<double> entropy;
  // router_replay = "record": the experts each token was routed to,
  // [T x MoE layers x k] token-major (PackedBatch::routed_experts). Else empty.
  std::vector<int64_t> routed_experts;
};

struct ForwardResult {
  std::vector<ModelOutputs> model_output;                  // one per microbatch
  std::map<std::string, std::vector<double>> metrics;      // per-microbatch lists, e.g. metrics["loss"]
  double loss = 0.0;                                        // loss over the whole batch (all dp ranks)
  // MoE models with output_router_logits: the load-balancing auxiliary loss
  // (HF's aux_loss); `loss` includes router_aux_loss_coef x it. 0 otherwise.
  double aux_loss = 0.0;
  int64_t num_tokens = 0;                                   // loss tokens over the whole batch
};

// A custom loss over one microbatch: returns the loss value, its gradient with
// respect to each position's log-prob (size T; ignored when forward_only),
// optionally its gradient with respect to each position's entropy (size T,
// with calculate_entropy; empty: the loss does not depend on it) and metrics. The built-in loss (loss_fn empty) is the masked mean next-token
// cross entropy over all loss tokens of the global batch.
struct LossOutput {
  double loss = 0.0;
  std::vector<double> grad_log_probs;
  std::vector<double> grad_entropy;
  std::map<std::string, double> metrics;
};
using LossFn = std::function<LossOutput(const ModelOutputs& outputs, const PackedBatch& microbatch)>;

}  // namespace bb
