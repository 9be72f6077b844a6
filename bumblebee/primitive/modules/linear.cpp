// Linear forward/backward and the column/row-parallel layers.
#include "bumblebee/primitive/modules/linear.h"

#include "bumblebee/ops/ops.h"

namespace bb {

Tensor linear_forward(const Tensor& x, const Tensor& w) {
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, x.dtype(), x.device());
  ops::matmul(x, false, w, true, y);
  return y;
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor& dx,
                     bool accumulate_dx, double dw_beta) {
  if (!accumulate_dx) dx = Tensor::empty({dy.size(0), w.size(1)}, dy.dtype(), dy.device());
  ops::matmul(dy, false, w, false, dx, 1.0, accumulate_dx ? 1.0 : 0.0);
  if (dw.defined()) ops::matmul(dy, true, x, false, dw, 1.0, dw_beta);
}

ColumnParallelLinear::ColumnParallelLinear(ParamStore& store, const std::string& name, int64_t in_features,
                                           int64_t out_features, TensorParallel& tp, bool declare)
    : weight_(&store.add(name, {out_features, in_features}, {ShardKind::Column, tp.rank(), tp.size()})) {
  if (declare) declare_lora(store, tp);
}

void ColumnParallelLinear::declare_lora(ParamStore& store, TensorParallel& tp) {
  if (store.lora() && store.lora()->targets(weight_->name))
    lora_.emplace(store, *weight_, *store.lora(), tp);
}

Tensor ColumnParallelLinear::forward(const Tensor& x_full, const LoraDropout& drop) const {
  Tensor y = linear_forward(x_full, weight_->value);
  if (lora_) lora_->forward(x_full, y, 0, drop);
  return y;
}

void ColumnParallelLinear::backward(const Tensor& dy, const Tensor& x_full, Tensor& dx_full, bool accumulate_dx,
                                    const LoraDropout& drop) {
  const Tensor dz = lora_ ? lora_->output_grad(dy, x_full) : dy;
  linear_backward(dz, x_full, weight_->value, weight_->grad, dx_full, accumulate_dx, grad_write_beta(*weight_));
  if (lora_) lora_->backward(dz, x_full, dx_full, 0, drop);
}

RowParallelLinear::RowParallelLinear(ParamStore& store, const std::string& name, int64_t in_features,
                                     int64_t out_features, TensorParallel& tp)
    : weight_(&store.add(name, {out_features, in_features}, {ShardKind::Row, tp.rank(), tp.size()})), tp_(&tp) {
  if (store.lora() && store.lora()->targets(name)) lora_.emplace(store, *weight_, *store.lora(), tp);
}

// The adapter's partial sums join the base's, so one reduction covers both.
Tensor RowParallelLinear::forward(const Tensor& x_local, const LoraDropout& drop) {
  Tensor y = linear_forward(x_local, weight_->value);
  if (lora_) lora_->forward(x_local, y, 0, drop);
  return tp_->exit(y);
}

Tensor RowParallelLinear::backward(const Tensor& dy, const Tensor& x_local, const LoraDropout& drop) {
  Tensor dy_full = tp_->exit_backward(dy);
  if (lora_) dy_full = lora_->output_grad(dy_full, x_local);
  Tensor dx;
  linear_backward(dy_full, x_local, weight_->value, weight_->grad, dx, false, grad_write_beta(*weight_));
  if (lora_) lora_->backward(dy_full, x_local, dx, 0, drop);
  return dx;
}

}  // namespace bb
