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
#pragma once

#include <string>

#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

// y = x W^T and its backward for a weight (or a fused view of adjacent weights).
Tensor linear_forward(const Tensor& x, const Tensor& w);
// dx = dy W (or dx += dy W when accumulate_dx), dW += dy^T x (skipped when
// dw is undefined: a frozen weight).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor& dx,
                     bool accumulate_dx);

class ColumnParallelLinear {
 public:
  ColumnParallelLinear(ParamStore& store, const std::string& name, int64_t in_features, int64_t out_features,
                       TensorParallel& tp);
  Parameter& weight() { return *weight_; }
  int64_t local_out() const { return weight_->local_shape[0]; }
  Tensor forward(const Tensor& x_full) const { return linear_forward(x_full, weight_->value); }
  void backward(const Tensor& dy, const Tensor& x_full, Tensor& dx_full, bool accumulate_dx) {
    linear_backward(dy, x_full, weight_->value, weight_->grad, dx_full, accumulate_dx);
  }

 private:
  Parameter* weight_;
};

class RowParallelLinear {
 public:
  RowParallelLinear(ParamStore& store, const std::string& name, int64_t in_features, int64_t out_features,
                    TensorParallel& tp);
  Parameter& weight() { return *weight_; }
  Tensor forward(const Tensor& x_local);              // exits the tp region
  Tensor backward(const Tensor& dy, const Tensor& x_local);   // returns dx_local

 private:
  Parameter* weight_;
  TensorParallel* tp_;
};

}  // namespace bb
