// CPU elementwise ops: add, mul, in-place accumulate and scale.
#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  visit_float(out.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
  });
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  visit_float(out.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = pa[i] * pb[i];
  });
}

// acc and x may differ in dtype (float32 gradients into a float64 buffer and
// back); the update is formed in double and rounded once to acc's dtype.
void add_(Tensor& acc, const Tensor& x, double alpha) {
  visit_float(acc.dtype(), "add_", [&](auto acc_tag) {
    using A = decltype(acc_tag);
    visit_float(x.dtype(), "add_", [&](auto x_tag) {
      using X = decltype(x_tag);
      A* pa = acc.data<A>();
      const X* px = x.data<X>();
      for (int64_t i = 0, n = acc.numel(); i < n; ++i) pa[i] = A(double(pa[i]) + alpha * double(px[i]));
    });
  });
}

void scale_(Tensor& x, double s) {
  visit_float(x.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] = T(double(p[i]) * s);
  });
}

}  // namespace bb::cpu
