// RMSNorm module.
#include "bumblebee/primitive/modules/rmsnorm.h"

#include "bumblebee/ops/ops.h"

namespace bb {

DType stat_dtype(DType act) { return act == DType::F64 ? DType::F64 : DType::F32; }

RMSNorm::RMSNorm(ParamStore& store, const std::string& name, int64_t dim, double eps)
    : weight_(&store.add(name, {dim}, {}, InitKind::Ones)), eps_(eps) {}

Tensor RMSNorm::forward(const Tensor& x, Saved& s) const {
  const int64_t dim = weight_->local_shape[0];
  Tensor x2 = x.view({-1, dim});
  // y takes the weight's dtype: under fp32_residual_connection a float32
  // residual stream normalises into bfloat16 activations.
  Tensor y = Tensor::empty(x2.shape(), weight_->value.dtype(), x.device());
  s.x = x2;
  s.rstd = Tensor::empty({x2.size(0)}, stat_dtype(x.dtype()), x.device());
  ops::rmsnorm_forward(x2, weight_->value, eps_, y, s.rstd);
  return y.view(x.shape());
}

Tensor RMSNorm::recompute(const Saved& s) const {
  BB_CHECK(s.x.defined(), "RMSNorm ", weight_->name, ": recompute without a saved forward");
  Tensor y = Tensor::empty(s.x.shape(), weight_->value.dtype(), s.x.device());
  Tensor rstd = Tensor::empty(s.rstd.shape(), s.rstd.dtype(), s.x.device());
  ops::rmsnorm_forward(s.x, weight_->value, eps_, y, rstd);
  return y;
}

Tensor RMSNorm::backward(const Tensor& dy, const Saved& s) {
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), dy.device());
  Tensor dw = weight_grad();
  ops::rmsnorm_backward(dy.view(s.x.shape()), s.x, weight_->value, s.rstd, dx, dw);
  return dx.view(dy.shape());
}

Tensor RMSNorm::forward_add(const Tensor& x, const Tensor& branch, Tensor& h, Saved& s) const {
  const int64_t dim = weight_->local_shape[0];
  Tensor h2 = h.view({-1, dim});
  Tensor y = Tensor::empty(h2.shape(), weight_->value.dtype(), x.device());
  s.x = h2;
  s.rstd = Tensor::empty({h2.size(0)}, stat_dtype(x.dtype()), x.device());
  ops::add_rmsnorm_forward(x.view(h2.shape()), branch.view(h2.shape()), weight_->value, eps_, h2, y, s.rstd);
  return y.view(x.shape());
}

Tensor RMSNorm::backward(const Tensor& dy, const Saved& s, const Tensor& residual_grad) {
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), dy.device());
  Tensor dw = weight_grad();
  ops::add_rmsnorm_backward(dy.view(s.x.shape()), s.x, weight_->value, s.rstd, residual_grad.view(s.x.shape()), dx,
                            dw);
  return dx.view(dy.shape());
}

Tensor RMSNorm::forward_rope(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Saved& s) const {
  Tensor y = Tensor::empty(x.shape(), weight_->value.dtype(), x.device());
  s.x = x;
  s.rstd = Tensor::empty({x.numel() / weight_->local_shape[0]}, stat_dtype(x.dtype()), x.device());
  ops::rmsnorm_rope_forward(x, weight_->value, eps_, position_ids, inv_freq, y, s.rstd);
  return y;
}

Tensor RMSNorm::recompute_rope(const Saved& s, const Tensor& position_ids, const Tensor& inv_freq) const {
  BB_CHECK(s.x.defined(), "RMSNorm ", weight_->name, ": recompute without a saved forward");
  Tensor y = Tensor::empty(s.x.shape(), weight_->value.dtype(), s.x.device());
  Tensor rstd = Tensor::empty(s.rstd.shape(), s.rstd.dtype(), s.x.device());
  ops::rmsnorm_rope_forward(s.x, weight_->value, eps_, position_ids, inv_freq, y, rstd);
  return y;
}

Tensor RMSNorm::backward_rope(const Tensor& dy, const Saved& s, const Tensor& position_ids, const Tensor& inv_freq) {
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), dy.device());
  Tensor dw = weight_grad();
  ops::rmsnorm_rope_backward(dy, s.x, weight_->value, s.rstd, position_ids, inv_freq, dx, dw);
  return dx;
}

// The fused kernels always produce the weight gradient; a frozen weight's
// goes to a scratch vector of `dim` elements (in the gradient dtype: float32
// under bfloat16 weights).
Tensor RMSNorm::weight_grad() {
  if (weight_->requires_grad()) return grad_to_accumulate(*weight_);
  const DType grad_dtype = weight_->value.dtype() == DType::BF16 ? DType::F32 : weight_->value.dtype();
  return Tensor::zeros(weight_->local_shape, grad_dtype, weight_->value.device());
}

}  // namespace bb
