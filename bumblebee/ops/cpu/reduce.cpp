// CPU reductions: sum, sum of squares, zero count, finiteness (to a host
// scalar) and dot (into a one-element tensor).
#include <cmath>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

double sum(const Tensor& x) {
  double total = 0.0;
  visit_float(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) total += double(p[i]);
  });
  return total;
}

double sum_squares(const Tensor& x) {
  double total = 0.0;
  visit_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) total += double(p[i]) * double(p[i]);
  });
  return total;
}

int64_t count_zeros(const Tensor& x) {
  int64_t zeros = 0;
  visit_float(x.dtype(), "count_zeros", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) zeros += p[i] == T(0);
  });
  return zeros;
}

ops::SquaresAndZeros sum_squares_and_zeros(const Tensor& x) {
  ops::SquaresAndZeros r;
  visit_float(x.dtype(), "sum_squares_and_zeros", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      r.sum_squares += double(p[i]) * double(p[i]);
      r.zeros += p[i] == T(0);
    }
  });
  return r;
}

void dot(const Tensor& a, const Tensor& b, Tensor& out) {
  double total = 0.0;
  visit_float(a.dtype(), "dot", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) total += double(pa[i]) * double(pb[i]);
  });
  out.data<double>()[0] = total;
}

bool all_finite(const Tensor& x) {
  bool finite = true;
  visit_float(x.dtype(), "all_finite", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n && finite; ++i) finite = std::isfinite(p[i]);
  });
  return finite;
}

}  // namespace bb::cpu
