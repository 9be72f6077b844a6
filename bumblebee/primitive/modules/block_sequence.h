// BlockSequence: blocks applied one after another as one Block, the unit that
// uniform full recompute wraps (a run of decoder layers keeps only its input).
#pragma once

#include <memory>
#include <vector>

#include "bumblebee/primitive/modules/block.h"

namespace bb {

class BlockSequence : public Block {
 public:
  struct Saved : BlockState {
    std::vector<std::unique_ptr<BlockState>> blocks;
  };
  explicit BlockSequence(std::vector<std::unique_ptr<Block>> blocks);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;

 private:
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace bb
