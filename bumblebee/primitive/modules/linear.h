// Linear layers over tensor-parallel weight shards: y = x W^T, W [out, in] as in HF.
//
// ColumnParallelLinear holds rows of W (output features split over tp); its
// input must already be inside the tensor-parallel region (the enclosing block
// enters it once for all the projections that share the input).
// RowParallelLinear holds columns of W (input features split over tp) and
// exits the region itself: its output is reduced (or reduce-scattered under
// sequence parallelism) over the group.
// Weight gradients accumulate; a backward never overwrites them. A frozen
// weight (no gradient buffer) gets no weight-gradient GEMM at all.
// When the store's LoRA configuration targets a layer, the layer declares its
// adapter right after its weight and adds it in forward and backward (lora.h).
#pragma once

#include <optional>
#include <string>

#include "bumblebee/primitive/modules/lora.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

// y = x W^T and its backward for a weight (or a fused view of adjacent weights).
Tensor linear_forward(const Tensor& x, const Tensor& w);
// dx = dy W (or dx += dy W when accumulate_dx), dW = dy^T x + dw_beta dW
// (skipped when dw is undefined: a frozen weight); dw_beta comes from
// grad_write_beta (parameter.h).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor& dx,
                     bool accumulate_dx, double dw_beta);

class ColumnParallelLinear {
 public:
  // declare_lora = false leaves the adapter to a later declare_lora() call,
  // so weights that form one fused operand (gate|up) stay adjacent.
  ColumnParallelLinear(ParamStore& store, const std::string& name, int64_t in_features, int64_t out_features,
                       TensorParallel& tp, bool declare_lora = true);
  void declare_lora(ParamStore& store, TensorParallel& tp);
  Parameter& weight() { return *weight_; }
  int64_t local_out() const { return weight_->local_shape[0]; }
  // The layer's LoRA adapter; null when it has none.
  LoraAdapter* lora() { return lora_ ? &*lora_ : nullptr; }
  // `drop`: the microbatch's LoRA dropout (seq.lora_dropout); the default is the identity.
  Tensor forward(const Tensor& x_full, const LoraDropout& drop = {}) const;
  void backward(const Tensor& dy, const Tensor& x_full, Tensor& dx_full, bool accumulate_dx,
                const LoraDropout& drop = {});

 private:
  Parameter* weight_;
  std::optional<LoraAdapter> lora_;
};

class RowParallelLinear {
 public:
  RowParallelLinear(ParamStore& store, const std::string& name, int64_t in_features, int64_t out_features,
                    TensorParallel& tp);
  Parameter& weight() { return *weight_; }
  LoraAdapter* lora() { return lora_ ? &*lora_ : nullptr; }
  Tensor forward(const Tensor& x_local, const LoraDropout& drop = {});              // exits the tp region
  Tensor backward(const Tensor& dy, const Tensor& x_local, const LoraDropout& drop = {});   // returns dx_local

 private:
  Parameter* weight_;
  TensorParallel* tp_;
  std::optional<LoraAdapter> lora_;
};

}  // namespace bb
