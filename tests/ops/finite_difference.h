// Test helpers for the op tests: random tensors, random projections as scalar
// losses, central finite differences and a relative error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "bumblebee/core/rng.h"
#include "bumblebee/core/tensor.h"

namespace bb::test {

inline Tensor random_tensor(Generator& gen, const Shape& shape, DType dtype = DType::F64, double std = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  gen.fill_normal(t, std);
  return t;
}

inline std::vector<double> random_vector(Generator& gen, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) x = gen.normal();
  return v;
}

// sum_i t_i * w_i: a random w makes every element of t matter to the loss,
// and w itself is the gradient of this loss with respect to t.
inline double project(const Tensor& t, const std::vector<double>& w) {
  const std::vector<double> v = t.to_doubles();
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

// d loss / d x for every element of x (a float64 host tensor), by central
// differences; x is left as it was.
inline std::vector<double> numeric_gradient(const std::function<double()>& loss, Tensor& x, double step = 1e-6) {
  double* p = x.data<double>();
  std::vector<double> grad(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + step;
    const double up = loss();
    p[i] = saved - step;
    const double down = loss();
    p[i] = saved;
    grad[size_t(i)] = (up - down) / (2.0 * step);
  }
  return grad;
}

// max |actual - expected| / max |expected|: relative to the tensor's scale, so
// elements near zero do not blow it up.
inline double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff = std::max(diff, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / std::max(scale, 1e-300);
}

inline std::vector<double> subtract(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

}  // namespace bb::test
