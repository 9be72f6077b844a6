// CPU RMSNorm over the last dimension, with HF transformers' rounding order.
//
// HF computes y = w * (x * rstd).to(x.dtype): the normalised row is rounded to
// the activation dtype before the weight multiply. On the CPU the compute
// dtype is the tensor dtype, so that rounding is the identity here; it matters
// on the CUDA path (bf16 activations, fp32 statistics), which the CPU oracle
// is compared against. The mean of squares accumulates in double and rstd is
// stored in the tensor dtype; forward and backward both use the stored rstd.
#include <cmath>
#include <vector>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd) {
  const int64_t n = w.numel(), rows = n == 0 ? 0 : x.numel() / n;
  visit_float(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    T* pr = rstd.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      double sum_sq = 0.0;
      for (int64_t j = 0; j < n; ++j) sum_sq += double(xr[j]) * double(xr[j]);
      const T rs = T(1.0 / std::sqrt(sum_sq / double(n) + eps));
      pr[r] = rs;
      for (int64_t j = 0; j < n; ++j) py[r * n + j] = pw[j] * T(xr[j] * rs);
    }
  });
}

// With xhat = x * rstd and g = dy * w:
//   dx = rstd * (g - xhat * mean(g * xhat)),   dw += sum over rows of dy * xhat.
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
  const int64_t n = w.numel(), rows = n == 0 ? 0 : x.numel() / n;
  visit_float(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pr = rstd.data<T>();
    T* pdx = dx.data<T>();
    T* pdw = dw.data<T>();
    std::vector<double> dw_rows(size_t(n), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      const T* dyr = pdy + r * n;
      const double rs = double(pr[r]);
      double g_dot_xhat = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double xhat = double(xr[j]) * rs;
        g_dot_xhat += double(dyr[j]) * double(pw[j]) * xhat;
        dw_rows[size_t(j)] += double(dyr[j]) * xhat;
      }
      const double mean_g_xhat = g_dot_xhat / double(n);
      for (int64_t j = 0; j < n; ++j) {
        const double xhat = double(xr[j]) * rs;
        pdx[r * n + j] = T(rs * (double(dyr[j]) * double(pw[j]) - xhat * mean_g_xhat));
      }
    }
    for (int64_t j = 0; j < n; ++j) pdw[j] = T(double(pdw[j]) + dw_rows[size_t(j)]);
  });
}

}  // namespace bb::cpu
