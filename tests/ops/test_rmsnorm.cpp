// Tests of RMSNorm on the CPU: forward and rstd against a naive float64
// computation, backward (dx, accumulated dw) against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

constexpr double kEps = 1e-5;

void naive_rmsnorm(const Tensor& x, const Tensor& w, std::vector<double>& y, std::vector<double>& rstd) {
  const std::vector<double> vx = x.to_doubles(), vw = w.to_doubles();
  const size_t n = vw.size(), rows = vx.size() / n;
  y.assign(vx.size(), 0.0);
  rstd.assign(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (size_t j = 0; j < n; ++j) ms += vx[r * n + j] * vx[r * n + j] / double(n);
    rstd[r] = 1.0 / std::sqrt(ms + kEps);
    for (size_t j = 0; j < n; ++j) y[r * n + j] = vw[j] * (vx[r * n + j] * rstd[r]);
  }
}

TEST(OpsRMSNorm, ForwardMatchesNaive) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(51);
    Tensor x = test::random_tensor(gen, {5, 7}, dt, 2.0), w = test::random_tensor(gen, {7}, dt);
    Tensor y = Tensor::empty({5, 7}, dt), rstd = Tensor::empty({5}, dt);
    ops::rmsnorm_forward(x, w, kEps, y, rstd);
    std::vector<double> ey, er;
    naive_rmsnorm(x, w, ey, er);
    const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
    EXPECT_LT(test::relative_error(y.to_doubles(), ey), tol) << dtype_name(dt);
    EXPECT_LT(test::relative_error(rstd.to_doubles(), er), tol) << dtype_name(dt);
  }
}

// Rows are everything but the last dimension, so [T, heads, D] works as is.
TEST(OpsRMSNorm, BackwardMatchesFiniteDifferences) {
  Generator gen(52);
  const Shape shape{3, 2, 7};
  Tensor x = test::random_tensor(gen, shape), w = test::random_tensor(gen, {7});
  const std::vector<double> proj = test::random_vector(gen, 42);
  Tensor y = Tensor::empty(shape, DType::F64), rstd = Tensor::empty({6}, DType::F64);
  auto loss = [&] {
    ops::rmsnorm_forward(x, w, kEps, y, rstd);
    return test::project(y, proj);
  };
  const std::vector<double> num_dx = test::numeric_gradient(loss, x);
  const std::vector<double> num_dw = test::numeric_gradient(loss, w);

  ops::rmsnorm_forward(x, w, kEps, y, rstd);
  Tensor dy = Tensor::from_doubles(proj, shape, DType::F64);
  Tensor dx = Tensor::empty(shape, DType::F64);
  Tensor dw = test::random_tensor(gen, {7});
  const std::vector<double> dw_before = dw.to_doubles();
  ops::rmsnorm_backward(dy, x, w, rstd, dx, dw);
  EXPECT_LT(test::relative_error(dx.to_doubles(), num_dx), 1e-6);
  EXPECT_LT(test::relative_error(test::subtract(dw.to_doubles(), dw_before), num_dw), 1e-6);
}

TEST(OpsRMSNorm, RejectsBadShapesAndDtypes) {
  Tensor x = Tensor::zeros({4, 6}, DType::F64), w = Tensor::zeros({6}, DType::F64);
  Tensor y = Tensor::zeros({4, 6}, DType::F64), rstd = Tensor::zeros({4}, DType::F64);
  Tensor w_bad = Tensor::zeros({5}, DType::F64), rstd_bad = Tensor::zeros({4, 1}, DType::F64);
  EXPECT_THROW(ops::rmsnorm_forward(x, w_bad, kEps, y, rstd), Error);
  EXPECT_THROW(ops::rmsnorm_forward(x, w, kEps, y, rstd_bad), Error);
  Tensor rstd32 = Tensor::zeros({4}, DType::F32);
  EXPECT_THROW(ops::rmsnorm_forward(x, w, kEps, y, rstd32), Error);
  Tensor dx_bad = Tensor::zeros({6, 4}, DType::F64), dw = Tensor::zeros({6}, DType::F64);
  EXPECT_THROW(ops::rmsnorm_backward(y, x, w, rstd, dx_bad, dw), Error);
}

}  // namespace
}  // namespace bb
