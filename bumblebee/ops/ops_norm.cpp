// The normalisation and rotary ops of ops.h (RMSNorm, the residual add
// with RMSNorm, RoPE, RMSNorm then RoPE): argument checks, then the backend.
#include "bumblebee/ops/ops.h"

#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {

// ---- RMSNorm --------------------------------------------------------------------------------------
// x may have any rank >= 1: its rows are everything but the last dimension
// (so q/k norm can pass [T, heads, D] without a reshape); rstd is flat [R].

namespace {
int64_t rmsnorm_rows(const char* op, const Tensor& x, const Tensor& w) {
  BB_CHECK(x.dim() >= 1, op, ": tensor 'x' must have at least one dimension");
  expect_dim(op, w, "w", 1);
  const int64_t n = x.size(-1);
  BB_CHECK(n > 0, op, ": tensor 'x' has an empty last dimension, shape ", shape_str(x.shape()));
  expect_shape(op, w, "w", {n});
  return x.numel() / n;
}
}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  const Device dev = common_device(op, {{x, "x"}, {w, "w"}, {y, "y"}, {rstd, "rstd"}});
  const int64_t rows = rmsnorm_rows(op, x, w);
  expect_shape(op, y, "y", x.shape());
  expect_shape(op, rstd, "rstd", {rows});
  BB_CHECK(eps >= 0.0, op, ": eps is negative (", eps, ")");
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {w, "w"}, {y, "y"}, {rstd, "rstd"}});
    BB_DISPATCH_CPU(rmsnorm_forward, x, w, eps, y, rstd);
  }
  BB_DISPATCH_CUDA(rmsnorm_forward, x, w, eps, y, rstd);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
  const char* op = "rmsnorm_backward";
  const Device dev =
      common_device(op, {{dy, "dy"}, {x, "x"}, {w, "w"}, {rstd, "rstd"}, {dx, "dx"}, {dw, "dw"}});
  const int64_t rows = rmsnorm_rows(op, x, w);
  expect_shape(op, dy, "dy", x.shape());
  expect_shape(op, dx, "dx", x.shape());
  expect_shape(op, rstd, "rstd", {rows});
  expect_shape(op, dw, "dw", w.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {dy, "dy"}, {w, "w"}, {rstd, "rstd"}, {dx, "dx"}, {dw, "dw"}});
    BB_DISPATCH_CPU(rmsnorm_backward, dy, x, w, rstd, dx, dw);
  }
  BB_DISPATCH_CUDA(rmsnorm_backward, dy, x, w, rstd, dx, dw);
}

// ---- residual add with RMSNorm ---------------------------------------------------------------------

namespace {
// Whether the bytes of a and b overlap (views of one storage may).
bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b)) return false;
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}
}  // namespace

void add_rmsnorm_forward(const Tensor& x, const Tensor& branch, const Tensor& w, double eps, Tensor& h, Tensor& y,
                         Tensor& rstd) {
  const char* op = "add_rmsnorm_forward";
  const Device dev =
      common_device(op, {{x, "x"}, {branch, "branch"}, {w, "w"}, {h, "h"}, {y, "y"}, {rstd, "rstd"}});
  const int64_t rows = rmsnorm_rows(op, x, w);
  expect_shape(op, branch, "branch", x.shape());
  expect_shape(op, h, "h", x.shape());
  expect_shape(op, y, "y", x.shape());
  expect_shape(op, rstd, "rstd", {rows});
  BB_CHECK(eps >= 0.0, op, ": eps is negative (", eps, ")");
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {branch, "branch"}, {w, "w"}, {h, "h"}, {y, "y"}, {rstd, "rstd"}});
    BB_DISPATCH_CPU(add_rmsnorm_forward, x, branch, w, eps, h, y, rstd);
  }
  BB_DISPATCH_CUDA(add_rmsnorm_forward, x, branch, w, eps, h, y, rstd);
}

void add_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& residual_grad, Tensor& dx, Tensor& dw) {
  const char* op = "add_rmsnorm_backward";
  const Device dev = common_device(op, {{dy, "dy"},
                                        {x, "x"},
                                        {w, "w"},
                                        {rstd, "rstd"},
                                        {residual_grad, "residual_grad"},
                                        {dx, "dx"},
                                        {dw, "dw"}});
  const int64_t rows = rmsnorm_rows(op, x, w);
  expect_shape(op, dy, "dy", x.shape());
  expect_shape(op, residual_grad, "residual_grad", x.shape());
  expect_shape(op, dx, "dx", x.shape());
  expect_shape(op, rstd, "rstd", {rows});
  expect_shape(op, dw, "dw", w.shape());
  BB_CHECK(!overlap(dx, residual_grad), op,
           ": tensor 'dx' overlaps 'residual_grad', which is added to dx after dx is formed");
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"},
                               {dy, "dy"},
                               {w, "w"},
                               {rstd, "rstd"},
                               {residual_grad, "residual_grad"},
                               {dx, "dx"},
                               {dw, "dw"}});
    BB_DISPATCH_CPU(add_rmsnorm_backward, dy, x, w, rstd, residual_grad, dx, dw);
  }
  BB_DISPATCH_CUDA(add_rmsnorm_backward, dy, x, w, rstd, residual_grad, dx, dw);
}

// ---- RoPE -------------------------------------------------------------------------------------------

namespace {
void check_rope(const char* op, const Tensor& x, const char* x_name, const Tensor& position_ids,
                const Tensor& inv_freq, const Tensor& out, const char* out_name, Device dev) {
  expect_dim(op, x, x_name, 3);
  BB_CHECK(x.size(2) % 2 == 0, op, ": head dimension of '", x_name, "' must be even, got shape ",
           shape_str(x.shape()));
  expect_shape(op, out, out_name, x.shape());
  expect_dim(op, position_ids, "position_ids", 1);
  expect_index(op, position_ids, "position_ids");
  expect_shape(op, position_ids, "position_ids", {x.size(0)});
  BB_CHECK(inv_freq.defined(), op, ": tensor 'inv_freq' is undefined");
  BB_CHECK(inv_freq.device().is_cpu() || inv_freq.device() == dev, op, ": tensor 'inv_freq' is on ",
           inv_freq.device().str(), ", expected the host or ", dev.str());
  BB_CHECK(inv_freq.dtype() == DType::F64, op, ": tensor 'inv_freq' must be float64, got ",
           dtype_name(inv_freq.dtype()));
  expect_shape(op, inv_freq, "inv_freq", {x.size(2) / 2});
}
}  // namespace

void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out) {
  const char* op = "rope_forward";
  const Device dev = common_device(op, {{x, "x"}, {position_ids, "position_ids"}, {out, "out"}});
  check_rope(op, x, "x", position_ids, inv_freq, out, "out", dev);
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {out, "out"}});
    BB_DISPATCH_CPU(rope_forward, x, position_ids, inv_freq, out);
  }
  BB_DISPATCH_CUDA(rope_forward, x, position_ids, inv_freq, out);
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx) {
  const char* op = "rope_backward";
  const Device dev = common_device(op, {{dy, "dy"}, {position_ids, "position_ids"}, {dx, "dx"}});
  check_rope(op, dy, "dy", position_ids, inv_freq, dx, "dx", dev);
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dy, "dy"}, {dx, "dx"}});
    BB_DISPATCH_CPU(rope_backward, dy, position_ids, inv_freq, dx);
  }
  BB_DISPATCH_CUDA(rope_backward, dy, position_ids, inv_freq, dx);
}

// ---- RMSNorm then RoPE --------------------------------------------------------------------------------
// x [N, heads, D]: RoPE's layout, with RMSNorm's rows the N * heads heads.

void rmsnorm_rope_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_rope_forward";
  const Device dev =
      common_device(op, {{x, "x"}, {w, "w"}, {position_ids, "position_ids"}, {y, "y"}, {rstd, "rstd"}});
  check_rope(op, x, "x", position_ids, inv_freq, y, "y", dev);
  const int64_t rows = rmsnorm_rows(op, x, w);
  expect_shape(op, rstd, "rstd", {rows});
  BB_CHECK(eps >= 0.0, op, ": eps is negative (", eps, ")");
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {w, "w"}, {y, "y"}, {rstd, "rstd"}});
    BB_DISPATCH_CPU(rmsnorm_rope_forward, x, w, eps, position_ids, inv_freq, y, rstd);
  }
  BB_DISPATCH_CUDA(rmsnorm_rope_forward, x, w, eps, position_ids, inv_freq, y, rstd);
}

void rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx, Tensor& dw) {
  const char* op = "rmsnorm_rope_backward";
  const Device dev = common_device(
      op, {{dy, "dy"}, {x, "x"}, {w, "w"}, {rstd, "rstd"}, {position_ids, "position_ids"}, {dx, "dx"}, {dw, "dw"}});
  check_rope(op, dy, "dy", position_ids, inv_freq, dx, "dx", dev);
  expect_shape(op, x, "x", dy.shape());
  const int64_t rows = rmsnorm_rows(op, x, w);
  expect_shape(op, rstd, "rstd", {rows});
  expect_shape(op, dw, "dw", w.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {dy, "dy"}, {w, "w"}, {rstd, "rstd"}, {dx, "dx"}, {dw, "dw"}});
    BB_DISPATCH_CPU(rmsnorm_rope_backward, dy, x, w, rstd, position_ids, inv_freq, dx, dw);
  }
  BB_DISPATCH_CUDA(rmsnorm_rope_backward, dy, x, w, rstd, position_ids, inv_freq, dx, dw);
}

}  // namespace bb::ops
