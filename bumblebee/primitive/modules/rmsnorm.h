// RMSNorm over the last dimension with a learned scale (HF Llama/Qwen semantics).
#pragma once

#include <string>

#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

class RMSNorm {
 public:
  struct Saved {
    Tensor x, rstd;
  };
  RMSNorm(ParamStore& store, const std::string& name, int64_t dim, double eps);
  Parameter& weight() { return *weight_; }
  // The dtype of the output and of the gradient backward takes: the weight's,
  // which a float32 residual stream (fp32_residual_connection) does not share.
  DType out_dtype() const { return weight_->value.dtype(); }
  // x [R, dim] (any leading rows); stat dtype follows ops.h's rules.
  Tensor forward(const Tensor& x, Saved& s) const;
  // The output of forward again, [R, dim], from the saved input: selective
  // recompute (the `layernorm` module) drops the output and rebuilds it for
  // backward. The same kernel on the same input gives the same bits; its
  // rstd goes to a scratch row and the saved one stays.
  Tensor recompute(const Saved& s) const;
  Tensor backward(const Tensor& dy, const Saved& s);

 private:
  Parameter* weight_;
  double eps_;
};

// Statistics dtype for activations of dtype `act` (CPU: same; bf16: float32).
DType stat_dtype(DType act);

}  // namespace bb
