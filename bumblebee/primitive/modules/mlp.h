// SwiGLU MLP block: down(silu(gate(x)) * up(x)).
//
// gate_proj and up_proj are declared back to back, so their shards form one
// [2F/tp, H] matrix and the block runs a single fused GEMM whose output rows
// are [gate | up], the layout ops::swiglu_forward reads.
#pragma once

#include <string>

#include "bumblebee/primitive/modules/linear.h"

namespace bb {

class SwiGLUMLP {
 public:
  struct Saved {
    Tensor x_full, gate_up, h;
  };
  SwiGLUMLP(ParamStore& store, const std::string& prefix, int64_t hidden, int64_t ffn, TensorParallel& tp);
  Tensor forward(const Tensor& x, Saved& s);
  Tensor backward(const Tensor& dy, const Saved& s);

 private:
  ParamStore* store_;
  TensorParallel* tp_;
  ColumnParallelLinear gate_proj_, up_proj_;
  RowParallelLinear down_proj_;
};

}  // namespace bb
