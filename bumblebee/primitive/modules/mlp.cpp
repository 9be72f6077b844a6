// SwiGLU MLP forward and backward.
#include "bumblebee/primitive/modules/mlp.h"

#include "bumblebee/ops/ops.h"

namespace bb {

SwiGLUMLP::SwiGLUMLP(ParamStore& store, const std::string& prefix, int64_t hidden, int64_t ffn, TensorParallel& tp)
    : store_(&store),
      tp_(&tp),
      gate_proj_(store, prefix + "gate_proj.weight", hidden, ffn, tp),
      up_proj_(store, prefix + "up_proj.weight", hidden, ffn, tp),
      down_proj_(store, prefix + "down_proj.weight", ffn, hidden, tp) {
  store.keep_together(gate_proj_.weight(), up_proj_.weight());
}

Tensor SwiGLUMLP::forward(const Tensor& x, Saved& s) {
  s.x_full = tp_->enter(x);
  s.gate_up = linear_forward(s.x_full, store_->fused_value(gate_proj_.weight(), up_proj_.weight()));
  s.h = Tensor::empty({s.gate_up.size(0), gate_proj_.local_out()}, x.dtype(), x.device());
  ops::swiglu_forward(s.gate_up, s.h);
  return down_proj_.forward(s.h);
}

Tensor SwiGLUMLP::backward(const Tensor& dy, const Saved& s) {
  Tensor dh = down_proj_.backward(dy, s.h);
  Tensor d_gate_up = Tensor::empty(s.gate_up.shape(), dy.dtype(), dy.device());
  ops::swiglu_backward(dh, s.gate_up, d_gate_up);
  Tensor dw = store_->fused_grad(gate_proj_.weight(), up_proj_.weight());
  Tensor dx_full;
  linear_backward(d_gate_up, s.x_full, store_->fused_value(gate_proj_.weight(), up_proj_.weight()), dw, dx_full,
                  false);
  return tp_->enter_backward(dx_full);
}

}  // namespace bb
