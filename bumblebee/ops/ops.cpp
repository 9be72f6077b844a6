// Argument checks and device dispatch for the op surface (ops.h).
//
// Each op checks what it can without reading tensor data on the device: that
// its tensors are defined, live on one device, have the documented shapes,
// and that index tensors hold int32/int64. Then it hands off to ops/cpu or
// ops/cuda. The CPU dtype rule (one floating dtype per call) is checked here;
// the CUDA backend checks its own mixed-precision rules (bf16 activations,
// fp32 statistics and gradients), which only it knows in detail.
#include "bumblebee/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/dropout.h"
#include "bumblebee/ops/op_profile.h"

#ifdef BB_WITH_CUDA
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/dropout.h"
#endif

namespace bb::ops {
namespace {

struct Arg {
  const Tensor& t;
  const char* name;
};

// The device every tensor of the call lives on.
Device common_device(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args) BB_CHECK(a.t.defined(), op, ": tensor '", a.name, "' is undefined");
  const Arg& first = *args.begin();
  for (const Arg& a : args) {
    BB_CHECK(a.t.device() == first.t.device(), op, ": tensor '", a.name, "' is on ", a.t.device().str(),
             " but '", first.name, "' is on ", first.t.device().str());
  }
  return first.t.device();
}

void expect_dim(const char* op, const Tensor& t, const char* name, int64_t dim) {
  BB_CHECK(t.dim() == dim, op, ": tensor '", name, "' must be ", dim, "-D, got shape ", shape_str(t.shape()));
}

void expect_shape(const char* op, const Tensor& t, const char* name, const Shape& shape) {
  BB_CHECK(t.shape() == shape, op, ": tensor '", name, "' has shape ", shape_str(t.shape()), ", expected ",
           shape_str(shape));
}

void expect_index(const char* op, const Tensor& t, const char* name) {
  BB_CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64, op, ": index tensor '", name,
           "' must be int32 or int64, got ", dtype_name(t.dtype()));
}

void expect_cpu_float(const char* op, const Arg& a) {
  BB_CHECK(a.t.dtype() == DType::F32 || a.t.dtype() == DType::F64, op,
           ": the CPU backend computes in float32 or float64, but tensor '", a.name, "' is ",
           dtype_name(a.t.dtype()));
}

// CPU rule: every floating tensor of one call has the same dtype.
void expect_cpu_same_float(const char* op, std::initializer_list<Arg> args) {
  const Arg& first = *args.begin();
  expect_cpu_float(op, first);
  for (const Arg& a : args) {
    BB_CHECK(a.t.dtype() == first.t.dtype(), op, ": CPU tensors of one call share a dtype, but '", a.name,
             "' is ", dtype_name(a.t.dtype()), " and '", first.name, "' is ", dtype_name(first.t.dtype()));
  }
}

[[maybe_unused]] [[noreturn]] void no_cuda_build(const std::string& op) {
  BB_FAIL(op, ": tensors are on CUDA but this Bumblebee build has no CUDA backend "
              "(configure found no CUDA toolkit, or BB_ENABLE_CUDA=OFF); use device=cpu or rebuild with CUDA");
}

// Head layout of q [Tq, Hq, Dqk], k [Tkv, Hkv, Dqk], v [Tkv, Hkv, Dv]: the
// v head dim may differ from the q/k one (multi-head latent attention), so
// out and dout are [Tq, Hq, Dv]. Throws on mismatch.
void check_attention_heads(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  expect_dim(op, q, "q", 3);
  expect_dim(op, k, "k", 3);
  expect_dim(op, v, "v", 3);
  const int64_t heads_q = q.size(1), heads_kv = k.size(1), head_dim_qk = q.size(2), head_dim_v = v.size(2);
  BB_CHECK(k.size(2) == head_dim_qk, op, ": k has head dim ", k.size(2), " but q has ", head_dim_qk,
           " (q and k share head_dim_qk)");
  BB_CHECK(v.size(0) == k.size(0) && v.size(1) == heads_kv, op, ": v has shape ", shape_str(v.shape()),
           ", expected [", k.size(0), ", ", heads_kv, ", head_dim_v] (the tokens and heads of k ",
           shape_str(k.shape()), "; head_dim_v may differ from head_dim_qk ", head_dim_qk, ")");
  BB_CHECK(head_dim_qk > 0 && head_dim_v > 0, op, ": head dims must be positive, got head_dim_qk ", head_dim_qk,
           " and head_dim_v ", head_dim_v);
  BB_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, op, ": query heads (", heads_q,
           ") must be a multiple of key/value heads (", heads_kv, ")");
}

// The shape of out / dout: query tokens and heads, the v head dim.
Shape attention_out_shape(const Tensor& q, const Tensor& v) { return {q.size(0), q.size(1), v.size(2)}; }

// Shapes shared by the attention forward and backward; returns nothing, throws on mismatch.
void check_attention_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& cu_seqlens, int64_t max_seqlen) {
  check_attention_heads(op, q, k, v);
  BB_CHECK(k.size(0) == q.size(0), op, ": k has ", k.size(0), " tokens but q has ", q.size(0),
           " (self-attention over one packed batch)");
  expect_dim(op, cu_seqlens, "cu_seqlens", 1);
  BB_CHECK(cu_seqlens.numel() >= 1, op, ": cu_seqlens needs at least one offset (the leading 0)");
  BB_CHECK(cu_seqlens.dtype() == DType::I32, op, ": cu_seqlens must be int32, got ",
           dtype_name(cu_seqlens.dtype()));
  BB_CHECK(max_seqlen >= 0, op, ": max_seqlen is negative (", max_seqlen, ")");
}

// On the host the offsets can be read without a device sync, so a bad
// cu_seqlens is caught here instead of becoming an out-of-bounds read.
void check_cu_seqlens_host(const char* op, const Tensor& cu_seqlens, int64_t tokens, int64_t max_seqlen,
                           const char* rows = "q") {
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t n = cu_seqlens.numel();
  BB_CHECK(cu[0] == 0, op, ": cu_seqlens must start at 0, got ", cu[0]);
  for (int64_t s = 0; s + 1 < n; ++s) {
    const int64_t len = int64_t(cu[s + 1]) - cu[s];
    BB_CHECK(len >= 0, op, ": cu_seqlens decreases at index ", s + 1, " (", cu[s], " -> ", cu[s + 1], ")");
    BB_CHECK(len <= max_seqlen, op, ": sequence ", s, " has ", len, " tokens, more than max_seqlen ", max_seqlen);
  }
  BB_CHECK(cu[n - 1] == tokens, op, ": cu_seqlens ends at ", cu[n - 1], " but ", rows, " has ", tokens, " tokens");
}

}  // namespace

// Each backend call is one line of the op profile (op_profile.h): `label`
// names it (built only while profiling), `first` is a tensor of the call,
// whose device says where to time it. The CUDA backend mirrors every op under
// the same name and parameters.
#define BB_TIMED(first, label, call)                                                                        \
  {                                                                                                         \
    profile::Scope bb_op_scope_((first).device(), profile::enabled() ? std::string(label) : std::string()); \
    return call;                                                                                            \
  }
#define BB_DISPATCH_CPU(fn, first, ...) BB_TIMED(first, #fn, cpu::fn(first __VA_OPT__(, ) __VA_ARGS__))
#ifdef BB_WITH_CUDA
#define BB_DISPATCH_CUDA(fn, first, ...) BB_TIMED(first, #fn, cuda::fn(first __VA_OPT__(, ) __VA_ARGS__))
#define BB_TIMED_CUDA(first, label, call) BB_TIMED(first, label, call)
#else
#define BB_DISPATCH_CUDA(fn, ...) no_cuda_build(#fn)
#define BB_TIMED_CUDA(first, label, call) no_cuda_build(label)
#endif

// "matmul MxNxK TN": the GEMM's sizes and the operands' layouts, so that each
// projection of a layer has its own line in the profile.
namespace {
std::string matmul_label(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  return detail::concat("matmul ", m, "x", n, "x", k, " ", trans_a ? "T" : "N", trans_b ? "T" : "N");
}
}  // namespace

// ---- GEMM -------------------------------------------------------------------------

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha, double beta) {
  const char* op = "matmul";
  const Device dev = common_device(op, {{a, "a"}, {b, "b"}, {c, "c"}});
  expect_dim(op, a, "a", 2);
  expect_dim(op, b, "b", 2);
  expect_dim(op, c, "c", 2);
  const int64_t m = trans_a ? a.size(1) : a.size(0), k_a = trans_a ? a.size(0) : a.size(1);
  const int64_t k_b = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  BB_CHECK(k_a == k_b, op, ": inner dimensions differ: a ", shape_str(a.shape()), (trans_a ? "^T" : ""), " @ b ",
           shape_str(b.shape()), (trans_b ? "^T" : ""));
  expect_shape(op, c, "c", {m, n});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{a, "a"}, {b, "b"}, {c, "c"}});
    BB_TIMED(a, matmul_label(m, n, k_a, trans_a, trans_b), cpu::matmul(a, trans_a, b, trans_b, c, alpha, beta));
  }
  BB_TIMED_CUDA(a, matmul_label(m, n, k_a, trans_a, trans_b), cuda::matmul(a, trans_a, b, trans_b, c, alpha, beta));
}

// ---- grouped GEMM ----------------------------------------------------------------------

namespace {

// offsets: G + 1 row offsets from 0, non-decreasing, ending at `rows`.
void check_group_offsets(const char* op, const std::vector<int64_t>& offsets, size_t groups, int64_t rows) {
  BB_CHECK(offsets.size() == groups + 1, op, ": ", groups, " weight matrices need ", groups + 1,
           " row offsets, got ", offsets.size());
  BB_CHECK(offsets.front() == 0, op, ": row offsets must start at 0, got ", offsets.front());
  for (size_t g = 0; g < groups; ++g) {
    BB_CHECK(offsets[g + 1] >= offsets[g], op, ": row offsets decrease at group ", g, " (", offsets[g], " -> ",
             offsets[g + 1], ")");
  }
  BB_CHECK(offsets.back() == rows, op, ": row offsets end at ", offsets.back(), " but the operands have ", rows,
           " rows");
}

// Every group's matrix on `dev` with `shape`; on the CPU also of `dtype`.
void check_group_matrices(const char* op, const std::vector<Tensor>& w, const char* name, const Shape& shape,
                          const Device& dev, DType dtype) {
  for (size_t g = 0; g < w.size(); ++g) {
    BB_CHECK(w[g].defined(), op, ": ", name, "[", g, "] is undefined");
    BB_CHECK(w[g].device() == dev, op, ": ", name, "[", g, "] is on ", w[g].device().str(), " but the rows are on ",
             dev.str());
    BB_CHECK(w[g].shape() == shape, op, ": ", name, "[", g, "] has shape ", shape_str(w[g].shape()), ", expected ",
             shape_str(shape));
    if (dev.is_cpu()) {
      BB_CHECK(w[g].dtype() == dtype, op, ": CPU tensors of one call share a dtype, but ", name, "[", g, "] is ",
               dtype_name(w[g].dtype()), " and the rows are ", dtype_name(dtype));
    }
  }
}

std::string grouped_label(const char* op, size_t groups, int64_t rows, int64_t n, int64_t k, const char* layout) {
  return detail::concat(op, " ", groups, "x", rows, "x", n, "x", k, " ", layout);
}

}  // namespace

void grouped_gemm(const Tensor& a, const std::vector<Tensor>& w, bool trans_w, const std::vector<int64_t>& offsets,
                  Tensor& c, double alpha, double beta) {
  const char* op = "grouped_gemm";
  const Device dev = common_device(op, {{a, "a"}, {c, "c"}});
  expect_dim(op, a, "a", 2);
  expect_dim(op, c, "c", 2);
  const int64_t rows = a.size(0), k = a.size(1), n = c.size(1);
  expect_shape(op, c, "c", {rows, n});
  check_group_offsets(op, offsets, w.size(), rows);
  check_group_matrices(op, w, "w", trans_w ? Shape{n, k} : Shape{k, n}, dev, a.dtype());
  const std::string label = profile::enabled() ? grouped_label(op, w.size(), rows, n, k, trans_w ? "NT" : "NN")
                                               : std::string();
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{a, "a"}, {c, "c"}});
    BB_TIMED(a, label, cpu::grouped_gemm(a, w, trans_w, offsets, c, alpha, beta));
  }
  BB_TIMED_CUDA(a, label, cuda::grouped_gemm(a, w, trans_w, offsets, c, alpha, beta));
}

void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                              const std::vector<Tensor>& dw, double alpha, double beta) {
  const char* op = "grouped_gemm_weight_grad";
  const Device dev = common_device(op, {{dy, "dy"}, {x, "x"}});
  expect_dim(op, dy, "dy", 2);
  expect_dim(op, x, "x", 2);
  const int64_t rows = dy.size(0), n = dy.size(1), k = x.size(1);
  expect_shape(op, x, "x", {rows, k});
  check_group_offsets(op, offsets, dw.size(), rows);
  check_group_matrices(op, dw, "dw", {n, k}, dev, dy.dtype());
  const std::string label = profile::enabled() ? grouped_label(op, dw.size(), n, k, rows, "TN") : std::string();
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dy, "dy"}, {x, "x"}});
    BB_TIMED(dy, label, cpu::grouped_gemm_weight_grad(dy, x, offsets, dw, alpha, beta));
  }
  BB_TIMED_CUDA(dy, label, cuda::grouped_gemm_weight_grad(dy, x, offsets, dw, alpha, beta));
}

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

// ---- attention ----------------------------------------------------------------------------------------

namespace {

// The spans of plain causal self-attention: every sequence against itself.
AttentionSpans self_spans(const Tensor& cu_seqlens, int64_t max_seqlen) {
  return {cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, AttentionMask::Causal};
}

void check_spans(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpans& spans) {
  check_attention_heads(op, q, k, v);
  for (auto [cu, name] : {std::pair{&spans.cu_seqlens_q, "cu_seqlens_q"}, {&spans.cu_seqlens_kv, "cu_seqlens_kv"}}) {
    expect_dim(op, *cu, name, 1);
    BB_CHECK(cu->numel() >= 1, op, ": ", name, " needs at least one offset (the leading 0)");
    BB_CHECK(cu->dtype() == DType::I32, op, ": ", name, " must be int32, got ", dtype_name(cu->dtype()));
  }
  BB_CHECK(spans.cu_seqlens_q.numel() == spans.cu_seqlens_kv.numel(), op, ": cu_seqlens_q has ",
           spans.cu_seqlens_q.numel() - 1, " sequences but cu_seqlens_kv ", spans.cu_seqlens_kv.numel() - 1);
  BB_CHECK(spans.max_seqlen_q >= 0 && spans.max_seqlen_kv >= 0, op, ": max_seqlen_q ", spans.max_seqlen_q,
           " or max_seqlen_kv ", spans.max_seqlen_kv, " is negative");
}

}  // namespace

const char* attention_mask_name(AttentionMask mask) { return mask == AttentionMask::Causal ? "causal" : "none"; }

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                       int64_t max_seqlen, double scale, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Device dev = common_device(
      op, {{q, "q"}, {k, "k"}, {v, "v"}, {cu_seqlens, "cu_seqlens"}, {out, "out"}, {lse, "lse"}});
  check_attention_shapes(op, q, k, v, cu_seqlens, max_seqlen);
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"}});
    check_cu_seqlens_host(op, cu_seqlens, q.size(0), max_seqlen);
    BB_DISPATCH_CPU(attention_forward, q, k, v, self_spans(cu_seqlens, max_seqlen), scale, out, lse);
  }
  BB_DISPATCH_CUDA(attention_forward, q, k, v, cu_seqlens, max_seqlen, scale, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, double scale, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                                        {cu_seqlens, "cu_seqlens"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
  check_attention_shapes(op, q, k, v, cu_seqlens, max_seqlen);
  expect_shape(op, dout, "dout", attention_out_shape(q, v));
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  expect_shape(op, dq, "dq", q.shape());
  expect_shape(op, dk, "dk", k.shape());
  expect_shape(op, dv, "dv", v.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {dout, "dout"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                               {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
    check_cu_seqlens_host(op, cu_seqlens, q.size(0), max_seqlen);
    BB_DISPATCH_CPU(attention_backward, dout, q, k, v, out, lse, self_spans(cu_seqlens, max_seqlen), scale, dq, dk,
                    dv);
  }
  BB_DISPATCH_CUDA(attention_backward, dout, q, k, v, out, lse, cu_seqlens, max_seqlen, scale, dq, dk, dv);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpans& spans, double scale,
                       Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Device dev = common_device(op, {{q, "q"}, {k, "k"}, {v, "v"}, {spans.cu_seqlens_q, "cu_seqlens_q"},
                                        {spans.cu_seqlens_kv, "cu_seqlens_kv"}, {out, "out"}, {lse, "lse"}});
  check_spans(op, q, k, v, spans);
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"}});
    check_cu_seqlens_host(op, spans.cu_seqlens_q, q.size(0), spans.max_seqlen_q);
    check_cu_seqlens_host(op, spans.cu_seqlens_kv, k.size(0), spans.max_seqlen_kv, "k");
    BB_DISPATCH_CPU(attention_forward, q, k, v, spans, scale, out, lse);
  }
  BB_DISPATCH_CUDA(attention_forward, q, k, v, spans, scale, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const char* op = "attention_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                                        {spans.cu_seqlens_q, "cu_seqlens_q"}, {spans.cu_seqlens_kv, "cu_seqlens_kv"},
                                        {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
  check_spans(op, q, k, v, spans);
  expect_shape(op, dout, "dout", attention_out_shape(q, v));
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  expect_shape(op, dq, "dq", q.shape());
  expect_shape(op, dk, "dk", k.shape());
  expect_shape(op, dv, "dv", v.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {dout, "dout"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                               {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
    check_cu_seqlens_host(op, spans.cu_seqlens_q, q.size(0), spans.max_seqlen_q);
    check_cu_seqlens_host(op, spans.cu_seqlens_kv, k.size(0), spans.max_seqlen_kv, "k");
    BB_DISPATCH_CPU(attention_backward, dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
  }
  BB_DISPATCH_CUDA(attention_backward, dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const char* op = "attention_merge";
  const Device dev =
      common_device(op, {{out, "out"}, {lse, "lse"}, {part_out, "part_out"}, {part_lse, "part_lse"}});
  expect_dim(op, out, "out", 3);
  expect_shape(op, part_out, "part_out", out.shape());
  expect_shape(op, lse, "lse", {out.size(0), out.size(1)});
  expect_shape(op, part_lse, "part_lse", lse.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{out, "out"}, {lse, "lse"}, {part_out, "part_out"}, {part_lse, "part_lse"}});
    BB_DISPATCH_CPU(attention_merge, out, lse, part_out, part_lse);
  }
  BB_DISPATCH_CUDA(attention_merge, out, lse, part_out, part_lse);
}

// ---- cross entropy --------------------------------------------------------------------------------------

void logits_row_max(const Tensor& logits, Tensor& row_max) {
  const char* op = "logits_row_max";
  const Device dev = common_device(op, {{logits, "logits"}, {row_max, "row_max"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, row_max, "row_max", {logits.size(0)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {row_max, "row_max"}});
    BB_DISPATCH_CPU(logits_row_max, logits, row_max);
  }
  BB_DISPATCH_CUDA(logits_row_max, logits, row_max);
}

void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit) {
  const char* op = "logits_sumexp_target";
  const Device dev = common_device(op, {{logits, "logits"}, {row_max, "row_max"}, {labels, "labels"},
                                        {sumexp, "sumexp"}, {target_logit, "target_logit"}});
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, row_max, "row_max", rows);
  expect_shape(op, labels, "labels", rows);
  expect_index(op, labels, "labels");
  expect_shape(op, sumexp, "sumexp", rows);
  expect_shape(op, target_logit, "target_logit", rows);
  if (dev.is_cpu()) {
    expect_cpu_same_float(
        op, {{logits, "logits"}, {row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"}});
    BB_DISPATCH_CPU(logits_sumexp_target, logits, row_max, labels, vocab_start, sumexp, target_logit);
  }
  BB_DISPATCH_CUDA(logits_sumexp_target, logits, row_max, labels, vocab_start, sumexp, target_logit);
}

void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit) {
  const char* op = "logits_softmax_stats";
  const Device dev = common_device(op, {{logits, "logits"}, {labels, "labels"}, {row_max, "row_max"},
                                        {sumexp, "sumexp"}, {target_logit, "target_logit"}});
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, labels, "labels", rows);
  expect_index(op, labels, "labels");
  expect_shape(op, row_max, "row_max", rows);
  expect_shape(op, sumexp, "sumexp", rows);
  expect_shape(op, target_logit, "target_logit", rows);
  if (dev.is_cpu()) {
    expect_cpu_same_float(
        op, {{logits, "logits"}, {row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"}});
    BB_DISPATCH_CPU(logits_softmax_stats, logits, labels, vocab_start, row_max, sumexp, target_logit);
  }
  BB_DISPATCH_CUDA(logits_softmax_stats, logits, labels, vocab_start, row_max, sumexp, target_logit);
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss) {
  const char* op = "cross_entropy_loss";
  const Device dev = common_device(
      op, {{row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"}, {lse, "lse"}, {loss, "loss"}});
  expect_dim(op, row_max, "row_max", 1);
  expect_shape(op, sumexp, "sumexp", row_max.shape());
  expect_shape(op, target_logit, "target_logit", row_max.shape());
  expect_shape(op, lse, "lse", row_max.shape());
  expect_shape(op, loss, "loss", row_max.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"},
                               {lse, "lse"}, {loss, "loss"}});
    BB_DISPATCH_CPU(cross_entropy_loss, row_max, sumexp, target_logit, lse, loss);
  }
  BB_DISPATCH_CUDA(cross_entropy_loss, row_max, sumexp, target_logit, lse, loss);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const Device dev = common_device(
      op, {{logits, "logits"}, {labels, "labels"}, {lse, "lse"}, {dloss, "dloss"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, labels, "labels", rows);
  expect_index(op, labels, "labels");
  expect_shape(op, lse, "lse", rows);
  expect_shape(op, dloss, "dloss", rows);
  expect_shape(op, dlogits, "dlogits", logits.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}, {dloss, "dloss"}, {dlogits, "dlogits"}});
    BB_DISPATCH_CPU(cross_entropy_backward, logits, labels, vocab_start, lse, dloss, dlogits);
  }
  BB_DISPATCH_CUDA(cross_entropy_backward, logits, labels, vocab_start, lse, dloss, dlogits);
}

void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum) {
  const char* op = "logits_zexp_sum";
  const Device dev = common_device(op, {{logits, "logits"}, {row_max, "row_max"}, {zexp_sum, "zexp_sum"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, row_max, "row_max", {logits.size(0)});
  expect_shape(op, zexp_sum, "zexp_sum", {logits.size(0)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {row_max, "row_max"}, {zexp_sum, "zexp_sum"}});
    BB_DISPATCH_CPU(logits_zexp_sum, logits, row_max, zexp_sum);
  }
  BB_DISPATCH_CUDA(logits_zexp_sum, logits, row_max, zexp_sum);
}

void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy) {
  const char* op = "entropy_from_sums";
  const Device dev =
      common_device(op, {{lse, "lse"}, {sumexp, "sumexp"}, {zexp_sum, "zexp_sum"}, {entropy, "entropy"}});
  expect_dim(op, lse, "lse", 1);
  expect_shape(op, sumexp, "sumexp", lse.shape());
  expect_shape(op, zexp_sum, "zexp_sum", lse.shape());
  expect_shape(op, entropy, "entropy", lse.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{lse, "lse"}, {sumexp, "sumexp"}, {zexp_sum, "zexp_sum"}, {entropy, "entropy"}});
    BB_DISPATCH_CPU(entropy_from_sums, lse, sumexp, zexp_sum, entropy);
  }
  BB_DISPATCH_CUDA(entropy_from_sums, lse, sumexp, zexp_sum, entropy);
}

void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits) {
  const char* op = "cross_entropy_entropy_backward";
  const Device dev = common_device(op, {{logits, "logits"}, {labels, "labels"}, {lse, "lse"}, {entropy, "entropy"},
                                        {dloss, "dloss"}, {dentropy, "dentropy"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, labels, "labels", rows);
  expect_index(op, labels, "labels");
  expect_shape(op, lse, "lse", rows);
  expect_shape(op, entropy, "entropy", rows);
  expect_shape(op, dloss, "dloss", rows);
  expect_shape(op, dentropy, "dentropy", rows);
  expect_shape(op, dlogits, "dlogits", logits.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}, {entropy, "entropy"}, {dloss, "dloss"},
                               {dentropy, "dentropy"}, {dlogits, "dlogits"}});
    BB_DISPATCH_CPU(cross_entropy_entropy_backward, logits, labels, vocab_start, lse, entropy, dloss, dentropy,
                    dlogits);
  }
  BB_DISPATCH_CUDA(cross_entropy_entropy_backward, logits, labels, vocab_start, lse, entropy, dloss, dentropy,
                   dlogits);
}

// ---- optimizer ----------------------------------------------------------------------------------------------

namespace {
// The storage combinations adamw_step takes (ops.h); each backend kernel
// covers exactly these.
void check_adamw_dtypes(const char* op, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, bool cpu) {
  const auto in = [](DType dt, std::initializer_list<DType> allowed) {
    return std::find(allowed.begin(), allowed.end(), dt) != allowed.end();
  };
  const auto names = [&] {
    return std::string(" (param ") + dtype_name(param.dtype()) + ", grad " + dtype_name(grad.dtype()) + ", exp_avg " +
           dtype_name(exp_avg.dtype()) + ", exp_avg_sq " + dtype_name(exp_avg_sq.dtype()) + ")";
  };
  if (param.dtype() == DType::F64) {
    BB_CHECK(exp_avg.dtype() == DType::F64 && exp_avg_sq.dtype() == DType::F64 &&
                 (grad.dtype() == DType::F64 || (!cpu && grad.dtype() == DType::F32)),
             op, ": a float64 param steps with float64 moments and a float64 gradient", cpu ? "" : " (or float32)",
             names());
    return;
  }
  BB_CHECK(in(param.dtype(), {DType::F32, DType::BF16}), op, ": param must be float64, float32 or bfloat16", names());
  for (const auto& [t, name] : {std::pair{&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}})
    BB_CHECK(in(t->dtype(), {DType::F32, DType::BF16}), op, ": with a ", dtype_name(param.dtype()), " param, ", name,
             " must be float32 or bfloat16", names());
}
}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWParams& hp) {
  const char* op = "adamw_step";
  const Device dev = common_device(
      op, {{param, "param"}, {grad, "grad"}, {exp_avg, "exp_avg"}, {exp_avg_sq, "exp_avg_sq"}});
  expect_shape(op, grad, "grad", param.shape());
  expect_shape(op, exp_avg, "exp_avg", param.shape());
  expect_shape(op, exp_avg_sq, "exp_avg_sq", param.shape());
  BB_CHECK(hp.step >= 1, op, ": step is 1-based (counted after the increment), got ", hp.step);
  BB_CHECK(hp.beta1 >= 0.0 && hp.beta1 < 1.0 && hp.beta2 >= 0.0 && hp.beta2 < 1.0, op,
           ": betas must lie in [0, 1), got (", hp.beta1, ", ", hp.beta2, ")");
  BB_CHECK(hp.lr >= 0.0 && hp.eps >= 0.0 && hp.weight_decay >= 0.0, op,
           ": lr, eps and weight_decay must be non-negative, got lr=", hp.lr, " eps=", hp.eps,
           " weight_decay=", hp.weight_decay);
  BB_CHECK(std::isfinite(hp.grad_scale), op, ": grad_scale is not finite (", hp.grad_scale, ")");
  check_adamw_dtypes(op, param, grad, exp_avg, exp_avg_sq, dev.is_cpu());
  if (dev.is_cpu()) {
    BB_DISPATCH_CPU(adamw_step, param, grad, exp_avg, exp_avg_sq, hp);
  }
  BB_DISPATCH_CUDA(adamw_step, param, grad, exp_avg, exp_avg_sq, hp);
}

// ---- MoE token permutation -----------------------------------------------------------------

namespace {
// token_of_row [N] against a token-major [T, H] tensor and a row-major [N, H] one.
void check_rows(const char* op, const Tensor& tokens, const char* tokens_name, const Tensor& rows,
                const char* rows_name, const Tensor& token_of_row) {
  expect_dim(op, tokens, tokens_name, 2);
  expect_dim(op, rows, rows_name, 2);
  expect_dim(op, token_of_row, "token_of_row", 1);
  expect_index(op, token_of_row, "token_of_row");
  BB_CHECK(token_of_row.size(0) == rows.size(0), op, ": token_of_row has ", token_of_row.size(0),
           " rows but '", rows_name, "' has ", rows.size(0));
  BB_CHECK(tokens.size(1) == rows.size(1), op, ": '", tokens_name, "' has ", tokens.size(1), " columns but '",
           rows_name, "' has ", rows.size(1));
}
// rows_by_token, when given: [T, k] int64 on `dev`, T*k = the N rows.
void check_rows_by_token(const char* op, const Tensor& rows_by_token, Device dev, int64_t tokens, int64_t rows) {
  if (!rows_by_token.defined()) return;
  BB_CHECK(rows_by_token.device() == dev, op, ": tensor 'rows_by_token' is on ", rows_by_token.device().str(),
           " but the rows are on ", dev.str());
  BB_CHECK(rows_by_token.dtype() == DType::I64, op, ": tensor 'rows_by_token' must be int64, got ",
           dtype_name(rows_by_token.dtype()));
  BB_CHECK(rows_by_token.dim() == 2 && rows_by_token.size(0) == tokens && rows_by_token.numel() == rows, op,
           ": tensor 'rows_by_token' has shape ", shape_str(rows_by_token.shape()), ", expected [", tokens,
           ", k] with ", tokens, " x k = ", rows, " rows");
}
}  // namespace

void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out) {
  const char* op = "moe_permute";
  const Device dev = common_device(op, {{x, "x"}, {token_of_row, "token_of_row"}, {out, "out"}});
  check_rows(op, x, "x", out, "out", token_of_row);
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{x, "x"}, {out, "out"}});
    BB_DISPATCH_CPU(moe_permute, x, token_of_row, out);
  }
  BB_DISPATCH_CUDA(moe_permute, x, token_of_row, out);
}

void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx, const Tensor& rows_by_token) {
  const char* op = "moe_permute_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {token_of_row, "token_of_row"}, {dx, "dx"}});
  check_rows(op, dx, "dx", dout, "dout", token_of_row);
  check_rows_by_token(op, rows_by_token, dev, dx.size(0), dout.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dout, "dout"}, {dx, "dx"}});
    BB_DISPATCH_CPU(moe_permute_backward, dout, token_of_row, dx, rows_by_token);
  }
  BB_DISPATCH_CUDA(moe_permute_backward, dout, token_of_row, dx, rows_by_token);
}

void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token) {
  const char* op = "moe_unpermute";
  const Device dev =
      common_device(op, {{y, "y"}, {token_of_row, "token_of_row"}, {probs, "probs"}, {out, "out"}});
  check_rows(op, out, "out", y, "y", token_of_row);
  expect_shape(op, probs, "probs", {y.size(0)});
  check_rows_by_token(op, rows_by_token, dev, out.size(0), y.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{y, "y"}, {probs, "probs"}, {out, "out"}});
    BB_DISPATCH_CPU(moe_unpermute, y, token_of_row, probs, out, rows_by_token);
  }
  BB_DISPATCH_CUDA(moe_unpermute, y, token_of_row, probs, out, rows_by_token);
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs) {
  const char* op = "moe_unpermute_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {y, "y"}, {token_of_row, "token_of_row"},
                                        {probs, "probs"}, {dy, "dy"}, {dprobs, "dprobs"}});
  check_rows(op, dout, "dout", y, "y", token_of_row);
  expect_shape(op, probs, "probs", {y.size(0)});
  expect_shape(op, dy, "dy", y.shape());
  expect_shape(op, dprobs, "dprobs", probs.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dout, "dout"}, {y, "y"}, {probs, "probs"}, {dy, "dy"}, {dprobs, "dprobs"}});
    BB_DISPATCH_CPU(moe_unpermute_backward, dout, y, token_of_row, probs, dy, dprobs);
  }
  BB_DISPATCH_CUDA(moe_unpermute_backward, dout, y, token_of_row, probs, dy, dprobs);
}

}  // namespace bb::ops

namespace bb::ops {
namespace {
void check_router_config(const char* op, const MoeRouterConfig& cfg, int64_t num_experts) {
  BB_CHECK(cfg.top_k >= 1 && cfg.top_k <= num_experts, op, ": top_k ", cfg.top_k, " must lie in [1, ", num_experts,
           "] (the expert count)");
  if (cfg.num_groups <= 1) return;
  BB_CHECK(num_experts % cfg.num_groups == 0, op, ": ", num_experts, " experts do not split into num_groups = ",
           cfg.num_groups, " equal groups");
  BB_CHECK(cfg.topk_groups >= 1 && cfg.topk_groups <= cfg.num_groups, op, ": topk_groups ", cfg.topk_groups,
           " must lie in [1, num_groups = ", cfg.num_groups, "]");
  BB_CHECK(cfg.topk_groups * (num_experts / cfg.num_groups) >= cfg.top_k, op, ": topk_groups ", cfg.topk_groups,
           " groups of ", num_experts / cfg.num_groups, " experts hold fewer than top_k = ", cfg.top_k);
}

void expect_i64(const char* op, const Tensor& t, const char* name) {
  BB_CHECK(t.dtype() == DType::I64, op, ": index tensor '", name, "' must be int64, got ", dtype_name(t.dtype()));
}

// Row indices of a routing: token_of_row and slot_of_row [N] int64 with N = T*k.
void check_row_indices(const char* op, const Tensor& token_of_row, const Tensor& slot_of_row, int64_t rows) {
  expect_shape(op, token_of_row, "token_of_row", {rows});
  expect_shape(op, slot_of_row, "slot_of_row", {rows});
  expect_i64(op, token_of_row, "token_of_row");
  expect_i64(op, slot_of_row, "slot_of_row");
}
}  // namespace

void moe_router_forward(const Tensor& logits, const MoeRouterConfig& cfg, const Tensor& expert_bias,
                        const Tensor& forced_experts, Tensor& scores, Tensor& experts, Tensor& weights) {
  const char* op = "moe_router_forward";
  const Device dev = common_device(op, {{logits, "logits"}, {scores, "scores"}, {experts, "experts"},
                                        {weights, "weights"}});
  expect_dim(op, logits, "logits", 2);
  const int64_t tokens = logits.size(0), e_count = logits.size(1), k = cfg.top_k;
  check_router_config(op, cfg, e_count);
  expect_shape(op, scores, "scores", logits.shape());
  expect_shape(op, experts, "experts", {tokens, k});
  expect_shape(op, weights, "weights", {tokens, k});
  expect_i64(op, experts, "experts");
  if (expert_bias.defined()) {
    common_device(op, {{logits, "logits"}, {expert_bias, "expert_bias"}});
    expect_shape(op, expert_bias, "expert_bias", {e_count});
  }
  if (forced_experts.defined()) {
    common_device(op, {{logits, "logits"}, {forced_experts, "forced_experts"}});
    expect_shape(op, forced_experts, "forced_experts", {tokens, k});
    expect_i64(op, forced_experts, "forced_experts");
    // Replayed ids come from outside (an inference engine): one host check.
    const Tensor host = forced_experts.to(Device::cpu());
    const int64_t* ids = host.data<int64_t>();
    for (int64_t i = 0; i < tokens * k; ++i)
      BB_CHECK(ids[i] >= 0 && ids[i] < e_count, op, ": forced expert of token ", i / k, " slot ", i % k, " is ",
               ids[i], ", outside [0, ", e_count, ")");
  }
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {scores, "scores"}, {weights, "weights"}});
    if (expert_bias.defined()) expect_cpu_same_float(op, {{logits, "logits"}, {expert_bias, "expert_bias"}});
    BB_DISPATCH_CPU(moe_router_forward, logits, cfg, expert_bias, forced_experts, scores, experts, weights);
  }
  BB_DISPATCH_CUDA(moe_router_forward, logits, cfg, expert_bias, forced_experts, scores, experts, weights);
}

void moe_router_backward(const Tensor& dweights, const Tensor& dscores_extra, const Tensor& logits,
                         const Tensor& scores, const Tensor& experts, const Tensor& weights,
                         const MoeRouterConfig& cfg, Tensor& dlogits) {
  const char* op = "moe_router_backward";
  const Device dev = common_device(op, {{dweights, "dweights"}, {logits, "logits"}, {scores, "scores"},
                                        {experts, "experts"}, {weights, "weights"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  const int64_t tokens = logits.size(0), e_count = logits.size(1), k = cfg.top_k;
  check_router_config(op, cfg, e_count);
  expect_shape(op, scores, "scores", logits.shape());
  expect_shape(op, dlogits, "dlogits", logits.shape());
  expect_shape(op, experts, "experts", {tokens, k});
  expect_shape(op, weights, "weights", {tokens, k});
  expect_shape(op, dweights, "dweights", {tokens, k});
  expect_i64(op, experts, "experts");
  if (dscores_extra.defined()) {
    common_device(op, {{logits, "logits"}, {dscores_extra, "dscores_extra"}});
    BB_CHECK(dscores_extra.shape() == logits.shape() || dscores_extra.shape() == Shape{e_count}, op,
             ": dscores_extra has shape ", shape_str(dscores_extra.shape()), ", expected ",
             shape_str(logits.shape()), " or [", e_count, "]");
  }
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{dweights, "dweights"}, {logits, "logits"}, {scores, "scores"},
                               {weights, "weights"}, {dlogits, "dlogits"}});
    if (dscores_extra.defined()) expect_cpu_same_float(op, {{logits, "logits"}, {dscores_extra, "dscores_extra"}});
    BB_DISPATCH_CPU(moe_router_backward, dweights, dscores_extra, logits, scores, experts, weights, cfg, dlogits);
  }
  BB_DISPATCH_CUDA(moe_router_backward, dweights, dscores_extra, logits, scores, experts, weights, cfg, dlogits);
}

void moe_sort_rows(const Tensor& experts, int64_t num_experts, Tensor& token_of_row, Tensor& slot_of_row,
                   Tensor& rows_per_expert) {
  const char* op = "moe_sort_rows";
  const Device dev = common_device(op, {{experts, "experts"}, {token_of_row, "token_of_row"},
                                        {slot_of_row, "slot_of_row"}, {rows_per_expert, "rows_per_expert"}});
  expect_dim(op, experts, "experts", 2);
  expect_i64(op, experts, "experts");
  BB_CHECK(num_experts >= 1, op, ": num_experts must be positive, got ", num_experts);
  check_row_indices(op, token_of_row, slot_of_row, experts.numel());
  expect_shape(op, rows_per_expert, "rows_per_expert", {num_experts});
  expect_i64(op, rows_per_expert, "rows_per_expert");
  if (dev.is_cpu()) BB_DISPATCH_CPU(moe_sort_rows, experts, num_experts, token_of_row, slot_of_row, rows_per_expert);
  BB_DISPATCH_CUDA(moe_sort_rows, experts, num_experts, token_of_row, slot_of_row, rows_per_expert);
}

void moe_rows_by_token(const Tensor& token_of_row, const Tensor& slot_of_row, Tensor& rows_by_token) {
  const char* op = "moe_rows_by_token";
  const Device dev = common_device(op, {{token_of_row, "token_of_row"}, {slot_of_row, "slot_of_row"},
                                        {rows_by_token, "rows_by_token"}});
  expect_dim(op, rows_by_token, "rows_by_token", 2);
  expect_i64(op, rows_by_token, "rows_by_token");
  check_row_indices(op, token_of_row, slot_of_row, rows_by_token.numel());
  if (dev.is_cpu()) BB_DISPATCH_CPU(moe_rows_by_token, token_of_row, slot_of_row, rows_by_token);
  BB_DISPATCH_CUDA(moe_rows_by_token, token_of_row, slot_of_row, rows_by_token);
}

void moe_row_weights(const Tensor& weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                     Tensor& row_weights) {
  const char* op = "moe_row_weights";
  const Device dev = common_device(op, {{weights, "weights"}, {token_of_row, "token_of_row"},
                                        {slot_of_row, "slot_of_row"}, {row_weights, "row_weights"}});
  expect_dim(op, weights, "weights", 2);
  expect_dim(op, row_weights, "row_weights", 1);
  check_row_indices(op, token_of_row, slot_of_row, row_weights.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{weights, "weights"}, {row_weights, "row_weights"}});
    BB_DISPATCH_CPU(moe_row_weights, weights, token_of_row, slot_of_row, row_weights);
  }
  BB_DISPATCH_CUDA(moe_row_weights, weights, token_of_row, slot_of_row, row_weights);
}

void moe_gather_row_grads(const Tensor& drow_weights, const Tensor& token_of_row, const Tensor& slot_of_row,
                          Tensor& dweights) {
  const char* op = "moe_gather_row_grads";
  const Device dev = common_device(op, {{drow_weights, "drow_weights"}, {token_of_row, "token_of_row"},
                                        {slot_of_row, "slot_of_row"}, {dweights, "dweights"}});
  expect_dim(op, dweights, "dweights", 2);
  expect_dim(op, drow_weights, "drow_weights", 1);
  check_row_indices(op, token_of_row, slot_of_row, drow_weights.size(0));
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{drow_weights, "drow_weights"}, {dweights, "dweights"}});
    BB_DISPATCH_CPU(moe_gather_row_grads, drow_weights, token_of_row, slot_of_row, dweights);
  }
  BB_DISPATCH_CUDA(moe_gather_row_grads, drow_weights, token_of_row, slot_of_row, dweights);
}

void moe_score_sums(const Tensor& scores, Tensor& sums) {
  const char* op = "moe_score_sums";
  const Device dev = common_device(op, {{scores, "scores"}, {sums, "sums"}});
  expect_dim(op, scores, "scores", 2);
  expect_shape(op, sums, "sums", {scores.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{scores, "scores"}, {sums, "sums"}});
    BB_DISPATCH_CPU(moe_score_sums, scores, sums);
  }
  BB_DISPATCH_CUDA(moe_score_sums, scores, sums);
}

void moe_router_lse(const Tensor& logits, Tensor& lse) {
  const char* op = "moe_router_lse";
  const Device dev = common_device(op, {{logits, "logits"}, {lse, "lse"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, lse, "lse", {logits.size(0)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}});
    BB_DISPATCH_CPU(moe_router_lse, logits, lse);
  }
  BB_DISPATCH_CUDA(moe_router_lse, logits, lse);
}

void moe_router_z_loss_backward(const Tensor& logits, const Tensor& lse, double scale, Tensor& dlogits) {
  const char* op = "moe_router_z_loss_backward";
  const Device dev = common_device(op, {{logits, "logits"}, {lse, "lse"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, lse, "lse", {logits.size(0)});
  expect_shape(op, dlogits, "dlogits", logits.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}, {dlogits, "dlogits"}});
    BB_DISPATCH_CPU(moe_router_z_loss_backward, logits, lse, scale, dlogits);
  }
  BB_DISPATCH_CUDA(moe_router_z_loss_backward, logits, lse, scale, dlogits);
}

}  // namespace bb::ops
