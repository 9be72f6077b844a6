// BlockSequence forward (first to last) and backward (last to first).
#include "bumblebee/primitive/modules/block_sequence.h"

#include "bumblebee/core/error.h"

namespace bb {

BlockSequence::BlockSequence(std::vector<std::unique_ptr<Block>> blocks) : blocks_(std::move(blocks)) {
  BB_CHECK(!blocks_.empty(), "BlockSequence needs at least one block");
}

Tensor BlockSequence::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  s->blocks.resize(blocks_.size());
  Tensor y = x;
  for (size_t i = 0; i < blocks_.size(); ++i) y = blocks_[i]->forward(y, seq, s->blocks[i]);
  state = std::move(s);
  return y;
}

Tensor BlockSequence::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "BlockSequence::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  Tensor d = dy;
  for (size_t i = blocks_.size(); i-- > 0;) d = blocks_[i]->backward(d, seq, s.blocks[i]);
  state.reset();
  return d;
}

}  // namespace bb
