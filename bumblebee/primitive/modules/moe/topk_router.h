// TopKRouter: the softmax top-k router of Qwen3-MoE (and Mixtral), with HF
// transformers' semantics: logits = x W^T (W = `mlp.gate.weight` [E, H]),
// probabilities = softmax over all E experts in the statistics precision
// (double on the host here; HF: float32), the k most probable experts per
// token, and their probabilities as routing weights, renormalised to sum to 1
// when norm_topk_prob is set.
//
// The routing decision is made on the host: the logits are read back, so the
// router works on every backend (a CUDA top-k kernel comes with the grouped
// GEMM). Backward takes the gradients of the routing weights (and any extra
// gradient of the probabilities, from the auxiliary loss) back through the
// renormalisation and the softmax to the logits, then to x and W.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

struct TopKRouterConfig {
  int64_t hidden = 0, num_experts = 0, top_k = 0;
  bool norm_topk_prob = false;
};

// One microbatch's routing, on the host.
struct Routing {
  int64_t tokens = 0, num_experts = 0, top_k = 0;
  std::vector<double> probs;     // [T, E] softmax of the router logits
  std::vector<int64_t> experts;  // [T, k] chosen experts, most probable first
  std::vector<double> weights;   // [T, k] routing weights
};

class TopKRouter {
 public:
  TopKRouter(ParamStore& store, const std::string& name, const TopKRouterConfig& cfg);
  Parameter& weight() { return *weight_; }
  Routing forward(const Tensor& x) const;
  // d_weights [T, k]; d_probs [T, E] an extra gradient of the probabilities
  // (empty: none). Accumulates into dx [T, H] (same dtype and device as x)
  // and into the router weight's gradient.
  void backward(const Routing& r, const std::vector<double>& d_weights, const std::vector<double>& d_probs,
                const Tensor& x, Tensor& dx) const;

 private:
  TopKRouterConfig cfg_;
  Parameter* weight_;
};

}  // namespace bb
