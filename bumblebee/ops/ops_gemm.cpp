// The GEMM ops of ops.h: matmul and the grouped GEMM of the MoE experts.
#include "bumblebee/ops/ops.h"

#include <string>
#include <vector>

#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {

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

}  // namespace bb::ops
