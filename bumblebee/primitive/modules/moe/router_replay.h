// RouterReplay: one microbatch's expert choices, recorded from a forward or
// replayed into one (RL frameworks train on the experts their inference
// engine chose).
//
// The choices are a flat host vector [T x L x k], token-major: token t's k
// expert ids for MoE layer l (the model's l-th MoE layer, in layer order)
// are at (t L + l) k, most preferred first. T are the microbatch's real
// tokens; padding tokens past them take experts 0 .. k-1 when replayed and
// are not recorded. Replay hands a layer's ids to the router as
// forced_experts: the weights still come from the live scores, so the router
// gets its gradients. Each layer reads and writes only its own ids, so
// pipeline stages share one vector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"

namespace bb {

enum class RouterReplayMode { Off, Record, Replay };
// "" | "record" | "replay"; anything else is an error naming the value.
RouterReplayMode parse_router_replay(const std::string& name);

class RouterReplay {
 public:
  // Replay: `routed_experts` holds the choices ([real_tokens x moe_layers x
  // top_k], checked here); record: it is ignored and filled by the forward.
  RouterReplay(RouterReplayMode mode, std::vector<int64_t> routed_experts, int64_t real_tokens, int64_t moe_layers,
               int64_t top_k, int64_t num_experts);
  RouterReplayMode mode() const { return mode_; }
  // Replay: MoE layer `moe_index`'s forced experts [tokens, k] int64 on `dev`
  // (tokens >= the real tokens: the rest is padding).
  Tensor forced_experts(int64_t moe_index, int64_t tokens, Device dev) const;
  // Record: MoE layer `moe_index`'s experts [tokens, k] (any device).
  void record(int64_t moe_index, const Tensor& experts);
  const std::vector<int64_t>& routed_experts() const { return ids_; }

 private:
  RouterReplayMode mode_;
  std::vector<int64_t> ids_;
  int64_t tokens_, layers_, top_k_;
};

// Checks `routed_experts` against the shape [real_tokens x moe_layers x top_k]
// and the id range [0, num_experts); the error names the numbers.
void check_routed_experts(const std::vector<int64_t>& routed_experts, int64_t real_tokens, int64_t moe_layers,
                          int64_t top_k, int64_t num_experts);

}  // namespace bb
