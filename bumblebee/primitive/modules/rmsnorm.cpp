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

Tensor RMSNorm::backward(const Tensor& dy, const Saved& s) {
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), dy.device());
  ops::rmsnorm_backward(dy.view(s.x.shape()), s.x, weight_->value, s.rstd, dx, weight_->grad);
  return dx.view(dy.shape());
}

}  // namespace bb
