// CPU GEMM through OpenBLAS (row-major cblas_sgemm / cblas_dgemm).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha, double beta) {
  const int64_t m = c.size(0), n = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS rejects a leading dimension of 0, and the product is empty anyway.
    if (beta == 0.0) {
      c.zero_();
    } else {
      scale_(c, beta);
    }
    return;
  }
  // Plain int leading dimensions work with both OpenBLAS and reference CBLAS headers.
  for (int64_t d : {m, n, k, a.size(1), b.size(1)}) {
    BB_CHECK(d <= INT_MAX, "matmul: dimension ", d, " exceeds the 32-bit range of CBLAS");
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const int lda = int(std::max<int64_t>(a.size(1), 1));
  const int ldb = int(std::max<int64_t>(b.size(1), 1));
  const int ldc = int(n);
  visit_float(c.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a.data<double>(), lda,
                  b.data<double>(), ldb, beta, c.data<double>(), ldc);
    } else {
      cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), float(alpha), a.data<float>(), lda,
                  b.data<float>(), ldb, float(beta), c.data<float>(), ldc);
    }
  });
}

}  // namespace bb::cpu
