// Recompute forward (input only) and backward (forward again, then backward).
#include "bumblebee/primitive/recompute/recompute.h"

namespace bb {

RecomputeMode recompute_from_name(const std::string& name) {
  if (name == "none" || name.empty()) return RecomputeMode::None;
  if (name == "selective") return RecomputeMode::Selective;
  if (name == "full") return RecomputeMode::Full;
  BB_FAIL("unknown recompute mode '", name, "' (expected none, selective or full)");
}

namespace {
struct RecomputeState : BlockState {
  Tensor x;
};
}  // namespace

Tensor Recompute::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  std::unique_ptr<BlockState> dropped;
  Tensor y = inner_->forward(x, seq, dropped);
  auto st = std::make_unique<RecomputeState>();
  st->x = x;
  state = std::move(st);
  return y;
}

Tensor Recompute::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "Recompute::backward without a saved forward");
  const Tensor x = static_cast<RecomputeState&>(*state).x;
  state.reset();
  std::unique_ptr<BlockState> inner_state;
  inner_->forward(x, seq, inner_state);
  return inner_->backward(dy, seq, inner_state);
}

BlockFactory recomputed(BlockFactory factory) {
  return [factory = std::move(factory)](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<Recompute>(factory(store, prefix));
  };
}

}  // namespace bb
