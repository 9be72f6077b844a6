// CPU residual add with RMSNorm (a decoder layer's residual stream into its
// next norm): add then rmsnorm_forward, and rmsnorm_backward then add_ of the
// residual gradient, in sequence, so the oracle's results are by construction
// the bits of the unfused path, which the CUDA kernels are compared against.
#include "bumblebee/ops/cpu/cpu_ops.h"

namespace bb::cpu {

void add_rmsnorm_forward(const Tensor& x, const Tensor& branch, const Tensor& w, double eps, Tensor& h, Tensor& y,
                         Tensor& rstd) {
  add(x, branch, h);
  rmsnorm_forward(h, w, eps, y, rstd);
}

void add_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& residual_grad, Tensor& dx, Tensor& dw) {
  rmsnorm_backward(dy, x, w, rstd, dx, dw);
  add_(dx, residual_grad, 1.0);
}

}  // namespace bb::cpu
