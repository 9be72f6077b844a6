// SharedExpertsMoE forward and backward: the sum of two branches on one input.
#include "bumblebee/primitive/modules/moe/shared_experts.h"

#include "bumblebee/ops/ops.h"

namespace bb {

Tensor SharedExpertsMoE::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  Tensor y = routed_->forward(x, seq, s->routed);
  ops::add_(y, shared_->forward(x, seq, s->shared));
  state = std::move(s);
  return y;
}

Tensor SharedExpertsMoE::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "SharedExpertsMoE::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  Tensor dx = routed_->backward(dy, seq, s.routed);
  ops::add_(dx, shared_->backward(dy, seq, s.shared));
  state.reset();
  return dx;
}

bool SharedExpertsMoE::drop_input(BlockState& state) {
  Saved& s = static_cast<Saved&>(state);
  const bool routed = routed_->drop_input(*s.routed);
  const bool shared = shared_->drop_input(*s.shared);
  return routed || shared;
}

void SharedExpertsMoE::restore_input(const Tensor& x, BlockState& state) {
  Saved& s = static_cast<Saved&>(state);
  routed_->restore_input(x, *s.routed);
  shared_->restore_input(x, *s.shared);
}

BlockFactory with_shared_experts(BlockFactory routed, BlockFactory shared) {
  return [routed, shared](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    std::unique_ptr<Block> r = routed(store, prefix);
    return std::make_unique<SharedExpertsMoE>(std::move(r), shared(store, prefix + "shared_experts."));
  };
}

}  // namespace bb
