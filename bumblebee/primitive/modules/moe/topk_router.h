// TopKRouter: the router of a MoE layer. logits = x W^T (W = `mlp.gate.weight`
// [E, H]), then ops::moe_router_forward on the device: softmax top-k with
// optional renormalisation (HF Qwen3-MoE / Mixtral), or sigmoid scoring with
// an expert bias that steers the choice only, group-limited top-k and a
// routed scaling factor (DeepSeek-V3 / Kimi-K2; the bias is the non-trainable
// parameter `mlp.gate.e_score_correction_bias` [E], declared for sigmoid
// scoring and, with either scoring, for auxiliary-loss-free balancing:
// expert_bias_update.h). Statistics are fp32 on CUDA and float64 with float64 weights.
//
// The routing also carries its rows, sorted by expert (ops::moe_sort_rows),
// their index by token (ops::moe_rows_by_token), and the row count of each
// expert, which RowCountCopy brings to the host: the one device -> host copy
// of a layer's routing, which the expert GEMMs and the dispatcher need to
// size their work. Backward takes the gradients of the routing weights (and any
// extra gradient of the scores, from the auxiliary loss) back through the
// router to the logits, adds the router z-loss's gradient there when asked,
// then goes on to x and W.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bumblebee/core/host_copy_stream.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

struct TopKRouterConfig {
  int64_t hidden = 0, num_experts = 0;
  ops::MoeRouterConfig routing;
  bool expert_bias = false;   // declare the bias with softmax scoring too
};

// One microbatch's routing: device tensors, except rows_per_expert.
struct Routing {
  int64_t tokens = 0, num_experts = 0, top_k = 0;
  Tensor logits;        // [T, E] x W^T, in x's dtype
  Tensor scores;        // [T, E] softmax or sigmoid of the router logits (statistics dtype)
  Tensor experts;       // [T, k] int64, most preferred first
  Tensor weights;       // [T, k] routing weights (statistics dtype)
  Tensor token_of_row;  // [N = T*k] int64: the rows sorted by expert, then slot, then token
  Tensor slot_of_row;   // [N] int64: the row's position j in its token's top-k
  Tensor rows_by_token; // [T, k] int64: each token's rows, ascending (ops::moe_rows_by_token)
  Tensor row_weights;   // [N] the row's routing weight
  Tensor counts;        // [E] int64: the rows of each expert
  std::vector<int64_t> rows_per_expert;   // [E]: counts on the host, once RowCountCopy::finish has run
  Tensor lse;           // [T] logsumexp of the logits (statistics dtype), for the z-loss; else undefined
};

class TopKRouter {
 public:
  TopKRouter(ParamStore& store, const std::string& prefix, const TopKRouterConfig& cfg);
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }   // null: no expert bias
  // forced_experts [T, k] int64 (router replay) or undefined; z_loss: fill
  // Routing::lse.
  Routing forward(const Tensor& x, const Tensor& forced_experts = Tensor(), bool z_loss = false) const;
  // drow_weights [N] (the rows' weight gradients); dscores [T, E] or [E], an
  // extra gradient of the scores (undefined: none); z_scale: the z-loss's
  // weight (its coefficient x the microbatch's share; the mean over tokens is
  // taken here). Accumulates into dx [T, H] (x's dtype and device) and into
  // the router weight's gradient.
  void backward(const Routing& r, const Tensor& drow_weights, const Tensor& dscores, const Tensor& x, Tensor& dx,
                double z_scale = 0.0) const;

 private:
  TopKRouterConfig cfg_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

// Routing::counts to the host, in two halves so that the layer can queue the
// work that needs no host counts (the permute) between them: start() queues
// the copy on a stream of its own behind the routing, and finish() waits for
// that copy alone while the GPU goes on with what was queued after it. The
// host's wait and its setup of the expert GEMMs then overlap the permute
// instead of leaving the GPU idle. On the host both happen at once.
class RowCountCopy {
 public:
  void start(const Routing& r);
  void finish(Routing& r);   // fills r.rows_per_expert

 private:
  std::unique_ptr<HostCopyStream> stream_;
  Tensor host_;   // [E] int64, pinned when the routing is on a GPU
};

// The dtype of the router's statistics for activations of dtype `dt`: float64
// stays float64 (the CPU oracle), everything else computes in float32.
DType router_stat_dtype(DType dt);

}  // namespace bb
