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

  // The residual add before the norm and the residual gradient after its
  // backward, each in the norm's op (ops::add_rmsnorm_forward / _backward),
  // for a pre-norm layer's residual stream. forward_add writes h = x + branch
  // into `h` (x's shape and dtype, allocated by the caller) and returns
  // forward(h); Saved keeps h as forward keeps x, so recompute rebuilds the
  // output from it. backward with `residual_grad` (x's shape and dtype)
  // returns backward(dy, s) + residual_grad, rounded as ops::add_ rounds it.
  Tensor forward_add(const Tensor& x, const Tensor& branch, Tensor& h, Saved& s) const;
  Tensor backward(const Tensor& dy, const Saved& s, const Tensor& residual_grad);

  // The same three for the norm followed by rotary embedding, as one op
  // (ops::rmsnorm_rope_forward / _backward): x [T, heads, dim] normalised per
  // head, then rotated by the angles of position_ids and inv_freq, as
  // ops::rope_forward does (Qwen3's q/k norms). Saved holds x and rstd, as
  // forward's does.
  Tensor forward_rope(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Saved& s) const;
  Tensor recompute_rope(const Saved& s, const Tensor& position_ids, const Tensor& inv_freq) const;
  Tensor backward_rope(const Tensor& dy, const Saved& s, const Tensor& position_ids, const Tensor& inv_freq);

 private:
  Parameter* weight_;
  double eps_;

  // What the backward ops add the weight gradient to: the gradient, or a
  // frozen weight's scratch.
  Tensor weight_grad();
};

// Statistics dtype for activations of dtype `act` (CPU: same; bf16: float32).
DType stat_dtype(DType act);

}  // namespace bb
