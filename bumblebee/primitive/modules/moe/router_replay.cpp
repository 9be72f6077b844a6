// RouterReplay: the layer slices of the choices, both ways.
#include "bumblebee/primitive/modules/moe/router_replay.h"

#include "bumblebee/core/error.h"

namespace bb {

RouterReplayMode parse_router_replay(const std::string& name) {
  if (name.empty()) return RouterReplayMode::Off;
  if (name == "record") return RouterReplayMode::Record;
  if (name == "replay") return RouterReplayMode::Replay;
  BB_FAIL("router_replay '", name, "' is not one of record, replay (or empty: off)");
}

void check_routed_experts(const std::vector<int64_t>& routed_experts, int64_t real_tokens, int64_t moe_layers,
                          int64_t top_k, int64_t num_experts) {
  const int64_t expect = real_tokens * moe_layers * top_k;
  BB_CHECK(int64_t(routed_experts.size()) == expect, "routed_experts holds ", routed_experts.size(),
           " ids; router replay needs tokens x MoE layers x top_k = ", real_tokens, " x ", moe_layers, " x ", top_k,
           " = ", expect);
  for (size_t i = 0; i < routed_experts.size(); ++i) {
    const int64_t e = routed_experts[i];
    if (e >= 0 && e < num_experts) continue;
    const int64_t per_token = moe_layers * top_k;
    BB_FAIL("routed_experts[", i, "] (token ", int64_t(i) / per_token, ", MoE layer ",
            (int64_t(i) % per_token) / top_k, ") = ", e, " is outside [0, ", num_experts, ")");
  }
}

RouterReplay::RouterReplay(RouterReplayMode mode, std::vector<int64_t> routed_experts, int64_t real_tokens,
                           int64_t moe_layers, int64_t top_k, int64_t num_experts)
    : mode_(mode), ids_(std::move(routed_experts)), tokens_(real_tokens), layers_(moe_layers), top_k_(top_k) {
  if (mode_ == RouterReplayMode::Replay) check_routed_experts(ids_, tokens_, layers_, top_k_, num_experts);
  if (mode_ == RouterReplayMode::Record) ids_.assign(size_t(tokens_ * layers_ * top_k_), 0);
}

Tensor RouterReplay::forced_experts(int64_t moe_index, int64_t tokens, Device dev) const {
  BB_CHECK(mode_ == RouterReplayMode::Replay, "router replay: forced experts asked outside replay");
  BB_CHECK(moe_index >= 0 && moe_index < layers_, "router replay: MoE layer ", moe_index, " of ", layers_);
  BB_CHECK(tokens >= tokens_, "router replay: a layer of ", tokens, " tokens for ", tokens_, " recorded ones");
  std::vector<int64_t> out(size_t(tokens * top_k_));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < top_k_; ++j)
      out[size_t(t * top_k_ + j)] = t < tokens_ ? ids_[size_t((t * layers_ + moe_index) * top_k_ + j)] : j;
  return Tensor::from_vector<int64_t>(out, {tokens, top_k_}).to(dev);
}

void RouterReplay::record(int64_t moe_index, const Tensor& experts) {
  BB_CHECK(mode_ == RouterReplayMode::Record, "router replay: record asked outside record");
  BB_CHECK(moe_index >= 0 && moe_index < layers_, "router replay: MoE layer ", moe_index, " of ", layers_);
  BB_CHECK(experts.dim() == 2 && experts.size(0) >= tokens_ && experts.size(1) == top_k_, "router replay: experts ",
           shape_str(experts.shape()), " for ", tokens_, " tokens x top_k ", top_k_);
  const Tensor host = experts.to(Device::cpu());
  const int64_t* e = host.data<int64_t>();
  for (int64_t t = 0; t < tokens_; ++t)
    for (int64_t j = 0; j < top_k_; ++j) ids_[size_t((t * layers_ + moe_index) * top_k_ + j)] = e[t * top_k_ + j];
}

}  // namespace bb
