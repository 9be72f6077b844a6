// Shared experts (DeepSeek-V2/V3, HF's DeepseekV3MoE): a dense SwiGLU MLP
// that every token passes through beside its routed experts,
//   y = routed(x) + shared_experts(x),
// as a Block filling a decoder layer's feed-forward slot. The routed part is
// any Block (a SparseMoE); the shared MLP's parameters are
// `mlp.shared_experts.{gate,up,down}_proj.weight`, split over tp as the dense
// MLP's are.
#pragma once

#include "bumblebee/primitive/modules/block.h"

namespace bb {

class SharedExpertsMoE : public Block {
 public:
  struct Saved : BlockState {
    std::unique_ptr<BlockState> routed, shared;
  };
  SharedExpertsMoE(std::unique_ptr<Block> routed, std::unique_ptr<Block> shared)
      : routed_(std::move(routed)), shared_(std::move(shared)) {}
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  // Both branches drop the input they share; it is rebuilt if either did.
  bool drop_input(BlockState& state) override;
  void restore_input(const Tensor& x, BlockState& state) override;

 private:
  std::unique_ptr<Block> routed_, shared_;
};

// The feed-forward slot: `routed` under the slot's prefix, then `shared` under
// prefix + "shared_experts." (HF's module order).
BlockFactory with_shared_experts(BlockFactory routed, BlockFactory shared);

}  // namespace bb
