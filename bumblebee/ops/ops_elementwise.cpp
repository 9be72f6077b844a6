// The elementwise, gather, dropout, reduction, embedding and SwiGLU ops of
// ops.h: argument checks, then the backend.
#include "bumblebee/ops/ops.h"

#include <vector>

#include "bumblebee/ops/dropout.h"
#include "bumblebee/ops/op_dispatch.h"

#ifdef BB_WITH_CUDA
#include "bumblebee/ops/cuda/dropout.h"
#endif

namespace bb::ops {

// ---- elementwise ------------------------------------------------------------------------

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  const Device dev = common_device(op, {{a, "a"}, {b, "b"}, {out, "out"}});
  expect_shape(op, b, "b", a.shape());
  expect_shape(op, out, "out", a.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{a, "a"}, {b, "b"}, {out, "out"}});
    BB_DISPATCH_CPU(add, a, b, out);
  }
  BB_DISPATCH_CUDA(add, a, b, out);
}

void add_(Tensor& acc, const Tensor& x, double alpha) {
  const char* op = "add_";
  const Device dev = common_device(op, {{acc, "acc"}, {x, "x"}});
  expect_shape(op, x, "x", acc.shape());
  if (dev.is_cpu()) {
    expect_cpu_float(op, {acc, "acc"});
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(add_, acc, x, alpha);
  }
  BB_DISPATCH_CUDA(add_, acc, x, alpha);
}

void scale_(Tensor& x, double s) {
  const char* op = "scale_";
  const Device dev = common_device(op, {{x, "x"}});
  if (dev.is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(scale_, x, s);
  }
  BB_DISPATCH_CUDA(scale_, x, s);
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "mul";
  const Device dev = common_device(op, {{a, "a"}, {b, "b"}, {out, "out"}});
  expect_shape(op, b, "b", a.shape());
  expect_shape(op, out, "out", a.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{a, "a"}, {b, "b"}, {out, "out"}});
    BB_DISPATCH_CPU(mul, a, b, out);
  }
  BB_DISPATCH_CUDA(mul, a, b, out);
}

// ---- column gather ------------------------------------------------------------------------

ColumnIndex make_column_index(int64_t in, const std::vector<int64_t>& index, Device device) {
  BB_CHECK(in > 0 && !index.empty(), "make_column_index: needs input and output columns, got ", in, " -> ",
           index.size());
  std::vector<int64_t> offsets(size_t(in + 1), 0);
  for (size_t j = 0; j < index.size(); ++j) {
    BB_CHECK(index[j] >= 0 && index[j] < in, "make_column_index: index[", j, "] = ", index[j], " is outside [0, ",
             in, ")");
    ++offsets[size_t(index[j] + 1)];
  }
  for (size_t c = 0; c < size_t(in); ++c) offsets[c + 1] += offsets[c];
  // Output columns in ascending order within each input column's range.
  std::vector<int64_t> columns(index.size()), next(offsets.begin(), offsets.end() - 1);
  for (size_t j = 0; j < index.size(); ++j) columns[size_t(next[size_t(index[j])]++)] = int64_t(j);
  const int64_t out = int64_t(index.size());
  return ColumnIndex{in, Tensor::from_vector(index, {out}).to(device),
                     Tensor::from_vector(offsets, {in + 1}).to(device), Tensor::from_vector(columns, {out}).to(device)};
}

namespace {
// x [N, in] (dx) against y [N, out] (dy) and the index tensors of `index`.
void check_column_gather(const char* op, const Tensor& wide, const char* wide_name, const Tensor& narrow,
                         const char* narrow_name, const ColumnIndex& index) {
  common_device(op, {{wide, wide_name},
                     {narrow, narrow_name},
                     {index.index, "index"},
                     {index.inverse_offsets, "inverse_offsets"},
                     {index.inverse_columns, "inverse_columns"}});
  expect_dim(op, wide, wide_name, 2);
  expect_shape(op, narrow, narrow_name, {wide.size(0), index.out()});
  BB_CHECK(wide.size(1) == index.in, op, ": tensor '", wide_name, "' has ", wide.size(1),
           " columns but the index selects from ", index.in);
  for (const Tensor* t : {&index.index, &index.inverse_offsets, &index.inverse_columns})
    BB_CHECK(t->dtype() == DType::I64, op, ": the column index tensors are int64 (make_column_index), got ",
             dtype_name(t->dtype()));
  expect_shape(op, index.inverse_offsets, "inverse_offsets", {index.in + 1});
  expect_shape(op, index.inverse_columns, "inverse_columns", {index.out()});
  BB_CHECK(narrow.dtype() == wide.dtype(), op, ": '", narrow_name, "' is ", dtype_name(narrow.dtype()), " but '",
           wide_name, "' is ", dtype_name(wide.dtype()));
}
}  // namespace

void gather_columns(const Tensor& x, const ColumnIndex& index, Tensor& y) {
  const char* op = "gather_columns";
  check_column_gather(op, x, "x", y, "y", index);
  if (x.device().is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(gather_columns, x, index, y);
  }
  BB_DISPATCH_CUDA(gather_columns, x, index, y);
}

void scatter_add_columns(const Tensor& dy, const ColumnIndex& index, Tensor& dx, bool accumulate) {
  const char* op = "scatter_add_columns";
  check_column_gather(op, dx, "dx", dy, "dy", index);
  if (dy.device().is_cpu()) {
    expect_cpu_float(op, {dy, "dy"});
    BB_DISPATCH_CPU(scatter_add_columns, dy, index, dx, accumulate);
  }
  BB_DISPATCH_CUDA(scatter_add_columns, dy, index, dx, accumulate);
}

// ---- dropout ------------------------------------------------------------------------------

void dropout_mask(Tensor& mask, uint64_t key, int64_t row_stride, int64_t col_offset, double p) {
  const char* op = "dropout_mask";
  const Device dev = common_device(op, {{mask, "mask"}});
  expect_dim(op, mask, "mask", 2);
  BB_CHECK(p >= 0.0 && p < 1.0, op, ": p must be in [0, 1), got ", p);
  BB_CHECK(row_stride >= mask.size(1) + col_offset && col_offset >= 0, op, ": row_stride ", row_stride,
           " does not hold col_offset ", col_offset, " + the mask's ", mask.size(1), " columns");
  if (dev.is_cpu()) {
    expect_cpu_float(op, {mask, "mask"});
    BB_DISPATCH_CPU(dropout_mask, mask, key, row_stride, col_offset, p);
  }
  BB_DISPATCH_CUDA(dropout_mask, mask, key, row_stride, col_offset, p);
}

// ---- reductions ---------------------------------------------------------------------------

double sum(const Tensor& x) {
  const char* op = "sum";
  if (common_device(op, {{x, "x"}}).is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(sum, x);
  }
  BB_DISPATCH_CUDA(sum, x);
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  if (common_device(op, {{x, "x"}}).is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(sum_squares, x);
  }
  BB_DISPATCH_CUDA(sum_squares, x);
}

int64_t count_zeros(const Tensor& x) {
  const char* op = "count_zeros";
  if (common_device(op, {{x, "x"}}).is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(count_zeros, x);
  }
  BB_DISPATCH_CUDA(count_zeros, x);
}

SquaresAndZeros sum_squares_and_zeros(const Tensor& x) {
  const char* op = "sum_squares_and_zeros";
  if (common_device(op, {{x, "x"}}).is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(sum_squares_and_zeros, x);
  }
  BB_DISPATCH_CUDA(sum_squares_and_zeros, x);
}

void dot(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "dot";
  const Device dev = common_device(op, {{a, "a"}, {b, "b"}, {out, "out"}});
  expect_shape(op, b, "b", a.shape());
  expect_shape(op, out, "out", {1});
  BB_CHECK(out.dtype() == DType::F64, op, ": out must be float64, got ", dtype_name(out.dtype()));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{a, "a"}, {b, "b"}});
    BB_DISPATCH_CPU(dot, a, b, out);
  }
  BB_DISPATCH_CUDA(dot, a, b, out);
}

bool all_finite(const Tensor& x) {
  const char* op = "all_finite";
  if (common_device(op, {{x, "x"}}).is_cpu()) {
    expect_cpu_float(op, {x, "x"});
    BB_DISPATCH_CPU(all_finite, x);
  }
  BB_DISPATCH_CUDA(all_finite, x);
}

// ---- embedding --------------------------------------------------------------------------------

void embedding_forward(const Tensor& weight, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding_forward";
  const Device dev = common_device(op, {{weight, "weight"}, {ids, "ids"}, {out, "out"}});
  expect_dim(op, weight, "weight", 2);
  expect_dim(op, ids, "ids", 1);
  expect_index(op, ids, "ids");
  expect_shape(op, out, "out", {ids.size(0), weight.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{weight, "weight"}, {out, "out"}});
    BB_DISPATCH_CPU(embedding_forward, weight, ids, vocab_start, out);
  }
  BB_DISPATCH_CUDA(embedding_forward, weight, ids, vocab_start, out);
}

void embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight) {
  const char* op = "embedding_backward";
  const Device dev = common_device(op, {{grad_out, "grad_out"}, {ids, "ids"}, {grad_weight, "grad_weight"}});
  expect_dim(op, grad_weight, "grad_weight", 2);
  expect_dim(op, ids, "ids", 1);
  expect_index(op, ids, "ids");
  expect_shape(op, grad_out, "grad_out", {ids.size(0), grad_weight.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{grad_out, "grad_out"}, {grad_weight, "grad_weight"}});
    BB_DISPATCH_CPU(embedding_backward, grad_out, ids, vocab_start, grad_weight);
  }
  BB_DISPATCH_CUDA(embedding_backward, grad_out, ids, vocab_start, grad_weight);
}

// ---- SwiGLU -----------------------------------------------------------------------------------------

void swiglu_forward(const Tensor& gate_up, Tensor& out) {
  const char* op = "swiglu_forward";
  const Device dev = common_device(op, {{gate_up, "gate_up"}, {out, "out"}});
  expect_dim(op, gate_up, "gate_up", 2);
  BB_CHECK(gate_up.size(1) % 2 == 0, op, ": tensor 'gate_up' needs an even number of columns, got shape ",
           shape_str(gate_up.shape()));
  expect_shape(op, out, "out", {gate_up.size(0), gate_up.size(1) / 2});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{gate_up, "gate_up"}, {out, "out"}});
    BB_DISPATCH_CPU(swiglu_forward, gate_up, out);
  }
  BB_DISPATCH_CUDA(swiglu_forward, gate_up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& d_gate_up) {
  const char* op = "swiglu_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {gate_up, "gate_up"}, {d_gate_up, "d_gate_up"}});
  expect_dim(op, dout, "dout", 2);
  expect_shape(op, gate_up, "gate_up", {dout.size(0), 2 * dout.size(1)});
  expect_shape(op, d_gate_up, "d_gate_up", gate_up.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dout, "dout"}, {gate_up, "gate_up"}, {d_gate_up, "d_gate_up"}});
    BB_DISPATCH_CPU(swiglu_backward, dout, gate_up, d_gate_up);
  }
  BB_DISPATCH_CUDA(swiglu_backward, dout, gate_up, d_gate_up);
}

}  // namespace bb::ops
