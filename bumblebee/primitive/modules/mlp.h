// SwiGLU MLP block: down(silu(gate(x)) * up(x)), the dense feed-forward of
// Llama and Qwen3 decoder layers (a Block, so it fills a layer's
// feed-forward slot and can be wrapped in Recompute).
//
// gate_proj and up_proj are declared back to back, so their shards form one
// [2F/tp, H] matrix and the block runs a single fused GEMM whose output rows
// are [gate | up], the layout ops::swiglu_forward reads.
//
// With recompute_activation (selective recompute's `mlp` module) forward
// drops the SwiGLU output h once down_proj has read it, and backward rebuilds
// it from the kept gate_up before down_proj's weight gradient needs it.
#pragma once

#include <string>

#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/linear.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

class SwiGLUMLP : public Block {
 public:
  struct Saved : BlockState {
    Tensor x_full, gate_up, h;
  };
  SwiGLUMLP(ParamStore& store, const std::string& prefix, int64_t hidden, int64_t ffn, ParallelContext& pc,
            bool recompute_activation = false);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  bool drop_input(BlockState& state) override;   // x_full
  void restore_input(const Tensor& x, BlockState& state) override;

 private:
  ParamStore* store_;
  TensorParallel* tp_;
  ColumnParallelLinear gate_proj_, up_proj_;
  RowParallelLinear down_proj_;
  bool recompute_activation_;
};

// The feed-forward slot filled with a SwiGLU MLP of `ffn` intermediate features.
BlockFactory swiglu_mlp(int64_t hidden, int64_t ffn, ParallelContext& pc, bool recompute_activation = false);

}  // namespace bb
