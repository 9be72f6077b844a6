// Recompute: a wrapper that trades one extra forward for activation memory.
//
// Around any Block (a whole decoder layer, or a part of one such as its
// feed-forward slot), forward keeps only the block's input and drops
// everything else; backward runs the block's forward again to rebuild its
// state, then its backward. Gradients are those of the plain block, exactly:
// the second forward sees the same input and parameters.
#pragma once

#include <memory>
#include <string>

#include "bumblebee/primitive/modules/block.h"

namespace bb {

// The recompute modes a model offers: none; selective (core attention only,
// inside SelfAttention); full (every decoder layer wrapped in Recompute).
enum class RecomputeMode { None, Selective, Full };
RecomputeMode recompute_from_name(const std::string& name);   // "none" | "selective" | "full"

class Recompute : public Block {
 public:
  explicit Recompute(std::unique_ptr<Block> inner) : inner_(std::move(inner)) {}
  Block& inner() { return *inner_; }
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;

 private:
  std::unique_ptr<Block> inner_;
};

// Wraps `factory`'s blocks in Recompute.
BlockFactory recomputed(BlockFactory factory);

}  // namespace bb
