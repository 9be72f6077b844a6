// CPU RMSNorm then RoPE over each head (Qwen3's q/k norms): the two ops in
// sequence, so the oracle's results are by construction the bits of the
// unfused path, which the CUDA kernels are compared against.
#include "bumblebee/ops/cpu/cpu_ops.h"

namespace bb::cpu {

void rmsnorm_rope_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd) {
  rmsnorm_forward(x, w, eps, y, rstd);
  rope_forward(y, position_ids, inv_freq, y);
}

void rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx, Tensor& dw) {
  Tensor dnorm = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  rope_backward(dy, position_ids, inv_freq, dnorm);
  rmsnorm_backward(dnorm, x, w, rstd, dx, dw);
}

}  // namespace bb::cpu
