// CPU grouped GEMM: one BLAS GEMM (cpu::matmul) per group with rows, on row
// views of the shared operands.
#include "bumblebee/ops/cpu/cpu_ops.h"

namespace bb::cpu {

void grouped_gemm(const Tensor& a, const std::vector<Tensor>& w, bool trans_w, const std::vector<int64_t>& offsets,
                  Tensor& c, double alpha, double beta) {
  for (size_t g = 0; g < w.size(); ++g) {
    const int64_t first = offsets[g], rows = offsets[g + 1] - first;
    if (rows == 0) continue;
    Tensor c_g = c.narrow(first, rows);
    matmul(a.narrow(first, rows), false, w[g], trans_w, c_g, alpha, beta);
  }
}

void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                              const std::vector<Tensor>& dw, double alpha, double beta) {
  for (size_t g = 0; g < dw.size(); ++g) {
    const int64_t first = offsets[g], rows = offsets[g + 1] - first;
    Tensor dw_g = dw[g];
    if (rows == 0) {
      // An empty sum: dw[g] = beta * dw[g], nothing to do when accumulating.
      if (beta == 0.0) dw_g.zero_();
      else if (beta != 1.0) scale_(dw_g, beta);
      continue;
    }
    matmul(dy.narrow(first, rows), true, x.narrow(first, rows), false, dw_g, alpha, beta);
  }
}

}  // namespace bb::cpu
