// GEMM through cuBLASLt: bfloat16 inputs, fp32 accumulation, bfloat16 or
// float32 output (or all float32), alpha/beta.
//
// cuBLASLt is column-major. A row-major matrix X [r, c] is, read column-major,
// X^T [c, r] with leading dimension c, so the row-major product
// C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T: B goes in cuBLASLt's first slot and A in its second,
// each with its own transpose flag, and no data moves.
//
// Descriptors, layouts and the heuristic's algorithm are built once per
// (shape, transposes, dtypes, pointer alignment, device) and cached: a
// training step repeats the same few shapes thousands of times.
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

struct GemmKey {
  int device;
  int64_t m, n, k;
  bool trans_a, trans_b;
  DType ab, c;
  int align_a, align_b, align_c;  // bytes, power of two up to 256
  bool operator==(const GemmKey& o) const {
    return device == o.device && m == o.m && n == o.n && k == o.k && trans_a == o.trans_a && trans_b == o.trans_b &&
           ab == o.ab && c == o.c && align_a == o.align_a && align_b == o.align_b && align_c == o.align_c;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const {
    size_t h = std::hash<int64_t>()(key.m);
    auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(uint64_t(key.n));
    mix(uint64_t(key.k));
    mix(uint64_t(key.device) << 1 | uint64_t(key.trans_a));
    mix(uint64_t(key.trans_b) << 8 | uint64_t(key.ab) << 16 | uint64_t(key.c) << 24);
    mix(uint64_t(key.align_a) << 32 | uint64_t(key.align_b) << 16 | uint64_t(key.align_c));
    return h;
  }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_plans_mutex;
std::unordered_map<GemmKey, GemmPlan, GemmKeyHash> g_plans;

int alignment_of(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (a % uintptr_t(align)) != 0) align >>= 1;
  return align;
}

cudaDataType_t cuda_type(DType dt) { return dt == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Plans live for the process, so they are never destroyed.
GemmPlan make_plan(const GemmKey& key) {
  GemmPlan plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // First slot holds B, second holds A (see the file comment).
  cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));

  // Column-major shapes as stored: B row-major [k, n] (or [n, k] when
  // transposed) is column-major [n, k] (or [k, n]); likewise for A; C^T is [n, m].
  uint64_t first_rows = key.trans_b ? key.k : key.n, first_cols = key.trans_b ? key.n : key.k;
  uint64_t second_rows = key.trans_a ? key.m : key.k, second_cols = key.trans_a ? key.k : key.m;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.first, cuda_type(key.ab), first_rows, first_cols, int64_t(first_rows)));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan.second, cuda_type(key.ab), second_rows, second_cols, int64_t(second_rows)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.out, cuda_type(key.c), uint64_t(key.n), uint64_t(key.m), key.n));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = cublaslt_workspace_bytes();
  uint32_t align_first = uint32_t(key.align_b), align_second = uint32_t(key.align_a), align_out = uint32_t(key.align_c);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first,
                                                    sizeof(align_first)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second,
                                                    sizeof(align_second)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_out,
                                                    sizeof(align_out)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_out,
                                                    sizeof(align_out)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), plan.desc, plan.first, plan.second, plan.out,
                                                     plan.out, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(st);
  BB_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for m=", key.m, " n=", key.n, " k=", key.k, " trans_a=",
           key.trans_a, " trans_b=", key.trans_b, " inputs ", dtype_name(key.ab), " output ", dtype_name(key.c),
           " (pointer alignments ", key.align_a, "/", key.align_b, "/", key.align_c, " bytes)");
  plan.algo = result.algo;
  return plan;
}

const GemmPlan& plan_for(const GemmKey& key) {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = g_plans.find(key);
  if (it == g_plans.end()) it = g_plans.emplace(key, make_plan(key)).first;
  return it->second;
}

}  // namespace

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha, double beta) {
  check_cuda(a, "matmul", "a");
  check_cuda_same(a, b, "matmul", "b");
  check_cuda_same(a, c, "matmul", "c");
  BB_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, "matmul: expects 2-D a, b, c, got ", shape_str(a.shape()),
           ", ", shape_str(b.shape()), ", ", shape_str(c.shape()));
  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  BB_CHECK(k == kb, "matmul: inner dimensions differ: op(a) is [", m, ", ", k, "], op(b) is [", kb, ", ", n, "]");
  check_shape(c, {m, n}, "matmul: c");
  BB_CHECK(a.dtype() == b.dtype(), "matmul: a is ", dtype_name(a.dtype()), " but b is ", dtype_name(b.dtype()));
  if (a.dtype() == DType::BF16) {
    check_dtype_in(c, "matmul", "c", {DType::BF16, DType::F32});
  } else {
    BB_CHECK(a.dtype() == DType::F32 && c.dtype() == DType::F32,
             "matmul: CUDA takes bfloat16 a, b with bfloat16 or float32 c, or all float32; got a, b ",
             dtype_name(a.dtype()), " and c ", dtype_name(c.dtype()));
  }
  if (m == 0 || n == 0) return;
  DeviceGuard guard(a.device().index);
  if (k == 0) {
    // An empty sum: cuBLASLt rejects k = 0, and the answer is beta * c
    // (with beta = 0, c is not read, as in BLAS).
    if (beta == 0.0) c.zero_();
    else scale_(c, beta);
    return;
  }
  GemmKey key{a.device().index, m, n, k, trans_a, trans_b, a.dtype(), c.dtype(),
              alignment_of(a.raw()), alignment_of(b.raw()), alignment_of(c.raw())};
  const GemmPlan& plan = plan_for(key);
  float alpha_f = float(alpha), beta_f = float(beta);
  CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan.desc, &alpha_f, b.raw(), plan.first, a.raw(), plan.second,
                              &beta_f, c.raw(), plan.out, c.raw(), plan.out, &plan.algo, cublaslt_workspace(),
                              cublaslt_workspace_bytes(), current_stream()));
}

}  // namespace bb::cuda
