// Grouped GEMM: all groups (an MoE layer's local experts) of one
// ops::grouped_gemm call in one launch. Two engines, chosen per call by the
// BB_GROUPED_GEMM environment variable (read at every call):
//   cutlass  CUTLASS's sm_90a ptr-array grouped GEMM (cutlass/grouped_gemm_sm90.h;
//            the default when built): bfloat16 in, bfloat16 out, and fp32 or
//            bfloat16 weight gradients accumulated in place. Calls it does not
//            take (other dtypes, a K or N not a multiple of 8, pointers not
//            16-byte aligned) run on cuBLAS.
//   cublas   cublasGemmGroupedBatchedEx, described below.
//
// cublasGemmGroupedBatchedEx batches "groups" of problems that share a shape;
// our groups differ in their row counts, so each group with rows is a cuBLAS
// group of one problem, and empty groups are left out. Sizes, transposes,
// alphas and betas are host arrays; the A/B/C pointer arrays must be in device
// memory, so the three are uploaded together in one small copy into
// stream-ordered scratch (from pageable memory: the copy returns once the
// host array may be reused, so nothing is kept alive past the call).
//
// cuBLAS is column-major; as in gemm.cu the row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, with B in cuBLAS's first slot and A in
// its second, and no data moves.
//
// The grouped call takes one dtype for A, B and C (bfloat16, float16 or
// float32 with fp32 compute, float64 with fp64). fp32 weight gradients of
// 16-bit inputs are outside that set, so they run as a loop of cublasGemmEx
// (which does take 16-bit inputs with fp32 output) on the same stream.
#include <cublas_v2.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.h"

namespace bb::cuda {
namespace {

constexpr int kMaxDevices = 64;

// The cuBLAS handle of the current device, created on first use and kept for
// the process; each call binds it to the backend's current stream and to the
// cuBLASLt workspace (the two libraries' calls are ordered on that stream, so
// they can share it).
cublasHandle_t cublas_handle() {
  static std::mutex mutex;
  static cublasHandle_t handles[kMaxDevices] = {};
  const int device = current_device();
  BB_CHECK(device >= 0 && device < kMaxDevices, "grouped_gemm: CUDA device ", device, " is beyond the ",
           kMaxDevices, " devices the backend keeps cuBLAS handles for");
  std::lock_guard<std::mutex> lock(mutex);
  if (!handles[device]) CUBLAS_CHECK(cublasCreate(&handles[device]));
  // cublasSetStream resets the workspace, so the workspace is set after it.
  CUBLAS_CHECK(cublasSetStream(handles[device], current_stream()));
  CUBLAS_CHECK(cublasSetWorkspace(handles[device], cublaslt_workspace(), cublaslt_workspace_bytes()));
  return handles[device];
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    default: BB_FAIL("grouped_gemm: unsupported dtype ", dtype_name(dt), " on CUDA");
  }
}

// One problem in cuBLAS's column-major terms (see the file comment).
struct Problem {
  cublasOperation_t op_first, op_second;
  int m, n, k;
  const void* first;
  int ld_first;
  const void* second;
  int ld_second;
  void* c;
  int ldc;
};

int to_int(int64_t v, const char* what) {
  BB_CHECK(v <= INT_MAX, "grouped_gemm: ", what, " ", v, " exceeds the 32-bit range of cuBLAS");
  return int(v);
}

// Row-major c [m, n] = op(a) op(b): a [m, k] (or [k, m] when trans_a), b [k, n] (or [n, k]).
Problem row_major_problem(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, int64_t k) {
  Problem p;
  p.op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.m = to_int(c.size(1), "column count");
  p.n = to_int(c.size(0), "row count");
  p.k = to_int(k, "inner dimension");
  p.first = b.raw();
  p.ld_first = to_int(b.size(1), "leading dimension");
  p.second = a.raw();
  p.ld_second = to_int(a.size(1), "leading dimension");
  p.c = c.raw();
  p.ldc = to_int(c.size(1), "leading dimension");
  return p;
}

template <typename Scalar>
void run_grouped(const std::vector<Problem>& problems, cudaDataType_t type, cublasComputeType_t compute, double alpha,
                 double beta, Device dev) {
  const size_t count = problems.size();
  std::vector<cublasOperation_t> op_first(count), op_second(count);
  std::vector<int> m(count), n(count), k(count), ld_first(count), ld_second(count), ldc(count), group_size(count, 1);
  std::vector<Scalar> alphas(count, Scalar(alpha)), betas(count, Scalar(beta));
  std::vector<const void*> pointers(3 * count);  // first slots, then second slots, then outputs
  for (size_t i = 0; i < count; ++i) {
    const Problem& p = problems[i];
    op_first[i] = p.op_first;
    op_second[i] = p.op_second;
    m[i] = p.m;
    n[i] = p.n;
    k[i] = p.k;
    ld_first[i] = p.ld_first;
    ld_second[i] = p.ld_second;
    ldc[i] = p.ldc;
    pointers[i] = p.first;
    pointers[count + i] = p.second;
    pointers[2 * count + i] = p.c;
  }
  static_assert(sizeof(void*) == sizeof(int64_t), "device pointers are stored in an int64 scratch tensor");
  Tensor scratch = Tensor::empty({int64_t(3 * count)}, DType::I64, dev);
  CUDA_CHECK(cudaMemcpyAsync(scratch.raw(), pointers.data(), pointers.size() * sizeof(void*), cudaMemcpyHostToDevice,
                             current_stream()));
  const void* const* d_pointers = static_cast<const void* const*>(scratch.raw());
  void* const* d_outputs = static_cast<void* const*>(scratch.raw()) + 2 * count;
  CUBLAS_CHECK(cublasGemmGroupedBatchedEx(cublas_handle(), op_first.data(), op_second.data(), m.data(), n.data(),
                                          k.data(), alphas.data(), d_pointers, type, ld_first.data(),
                                          d_pointers + count, type, ld_second.data(), betas.data(), d_outputs, type,
                                          ldc.data(), int(count), group_size.data(), compute));
}

// fp32 output from 16-bit inputs: one cublasGemmEx per problem.
void run_loop(const std::vector<Problem>& problems, cudaDataType_t ab, cudaDataType_t c, double alpha, double beta) {
  const float alpha_f = float(alpha), beta_f = float(beta);
  cublasHandle_t handle = cublas_handle();
  for (const Problem& p : problems) {
    CUBLAS_CHECK(cublasGemmEx(handle, p.op_first, p.op_second, p.m, p.n, p.k, &alpha_f, p.first, ab, p.ld_first,
                              p.second, ab, p.ld_second, &beta_f, p.c, c, p.ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  }
}

void run(const std::vector<Problem>& problems, DType ab, DType c, double alpha, double beta, Device dev) {
  if (problems.empty()) return;
  if (ab != c) {
    run_loop(problems, cuda_type(ab), cuda_type(c), alpha, beta);
  } else if (ab == DType::F64) {
    run_grouped<double>(problems, CUDA_R_64F, CUBLAS_COMPUTE_64F, alpha, beta, dev);
  } else {
    run_grouped<float>(problems, cuda_type(ab), CUBLAS_COMPUTE_32F, alpha, beta, dev);
  }
}

// beta * t, the answer of an empty sum (t is not read when beta = 0, as in BLAS).
void scale_by_beta(Tensor& t, double beta) {
  if (beta == 0.0) t.zero_();
  else if (beta != 1.0) scale_(t, beta);
}

constexpr std::initializer_list<DType> kGemmDtypes = {DType::BF16, DType::F16, DType::F32, DType::F64};

// Whether this call may go to CUTLASS: BB_GROUPED_GEMM=cutlass|cublas, cutlass
// when unset and built; cutlass in a build without it is an error.
bool cutlass_selected() {
  const char* env = std::getenv("BB_GROUPED_GEMM");
  const bool unset = env == nullptr || *env == '\0';
  BB_CHECK(unset || std::strcmp(env, "cutlass") == 0 || std::strcmp(env, "cublas") == 0,
           "BB_GROUPED_GEMM is '", env, "'; it must be cutlass or cublas");
#ifdef BB_WITH_CUTLASS
  return unset || std::strcmp(env, "cutlass") == 0;
#else
  BB_CHECK(unset || std::strcmp(env, "cublas") == 0,
           "BB_GROUPED_GEMM=cutlass, but this build has no CUTLASS (scripts/fetch_cuda_deps.sh fetches it)");
  return false;
#endif
}

#ifdef BB_WITH_CUTLASS
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// TMA needs 16-byte aligned bases and leading dimensions: k and n multiples
// of 8 bfloat16s (then every group's rows start aligned too); sizes in int.
bool cutlass_takes(ExpertGemm kind, DType ab, DType d, int64_t k, int64_t n, int64_t rows,
                   std::initializer_list<const Tensor*> tensors, const std::vector<Tensor>& per_group) {
  if (!cutlass_grouped_gemm_takes(kind, ab, d)) return false;
  if (k % 8 != 0 || n % 8 != 0 || k > INT_MAX || n > INT_MAX || rows > INT_MAX) return false;
  for (const Tensor* t : tensors)
    if (!aligned16(t->raw())) return false;
  for (const Tensor& t : per_group)
    if (!aligned16(t.raw())) return false;
  return true;
}
#endif

}  // namespace

bool cutlass_grouped_gemm_built() {
#ifdef BB_WITH_CUTLASS
  return true;
#else
  return false;
#endif
}

void grouped_gemm(const Tensor& a, const std::vector<Tensor>& w, bool trans_w, const std::vector<int64_t>& offsets,
                  Tensor& c, double alpha, double beta) {
  const char* op = "grouped_gemm";
  check_cuda(a, op, "a");
  check_cuda_same(a, c, op, "c");
  check_dtype_in(a, op, "a", kGemmDtypes);
  BB_CHECK(c.dtype() == a.dtype(), op, ": c is ", dtype_name(c.dtype()), " but a is ", dtype_name(a.dtype()));
  for (size_t g = 0; g < w.size(); ++g) {
    check_cuda_same(a, w[g], op, "w");
    BB_CHECK(w[g].dtype() == a.dtype(), op, ": w[", g, "] is ", dtype_name(w[g].dtype()), " but a is ",
             dtype_name(a.dtype()));
  }
  const int64_t k = a.size(1);
  if (c.numel() == 0) return;
  DeviceGuard guard(a.device().index);
  [[maybe_unused]] const bool cutlass = cutlass_selected();
  if (k == 0) {
    scale_by_beta(c, beta);
    return;
  }
#ifdef BB_WITH_CUTLASS
  const ExpertGemm kind = trans_w ? ExpertGemm::Forward : ExpertGemm::InputGrad;
  if (cutlass && cutlass_takes(kind, a.dtype(), c.dtype(), k, c.size(1), a.size(0), {&a, &c}, w)) {
    std::vector<ExpertGemmGroup> groups;
    for (size_t g = 0; g < w.size(); ++g) {
      const int64_t first = offsets[g], rows = offsets[g + 1] - first;
      if (rows == 0) continue;
      groups.push_back({int(rows), int(c.size(1)), int(k), a.narrow(first, rows).raw(), w[g].raw(),
                        c.narrow(first, rows).raw()});
    }
    cutlass_grouped_gemm(kind, c.dtype(), groups, float(alpha), float(beta));
    return;
  }
#endif
  std::vector<Problem> problems;
  for (size_t g = 0; g < w.size(); ++g) {
    const int64_t first = offsets[g], rows = offsets[g + 1] - first;
    if (rows == 0) continue;
    Tensor c_g = c.narrow(first, rows);
    problems.push_back(row_major_problem(a.narrow(first, rows), false, w[g], trans_w, c_g, k));
  }
  run(problems, a.dtype(), c.dtype(), alpha, beta, a.device());
}

void grouped_gemm_weight_grad(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                              const std::vector<Tensor>& dw, double alpha, double beta) {
  const char* op = "grouped_gemm_weight_grad";
  check_cuda(dy, op, "dy");
  check_cuda_same(dy, x, op, "x");
  check_dtype_in(dy, op, "dy", kGemmDtypes);
  BB_CHECK(x.dtype() == dy.dtype(), op, ": x is ", dtype_name(x.dtype()), " but dy is ", dtype_name(dy.dtype()));
  if (dw.empty()) return;
  const bool sixteen_bit = dy.dtype() == DType::BF16 || dy.dtype() == DType::F16;
  for (size_t g = 0; g < dw.size(); ++g) {
    check_cuda_same(dy, dw[g], op, "dw");
    BB_CHECK(dw[g].dtype() == dw[0].dtype(), op, ": dw[", g, "] is ", dtype_name(dw[g].dtype()), " but dw[0] is ",
             dtype_name(dw[0].dtype()));
  }
  BB_CHECK(dw[0].dtype() == dy.dtype() || (sixteen_bit && dw[0].dtype() == DType::F32), op, ": dw is ",
           dtype_name(dw[0].dtype()), " with dy ", dtype_name(dy.dtype()),
           "; it must be dy's dtype, or float32 with bfloat16/float16 inputs");
  if (dw[0].numel() == 0) return;
  DeviceGuard guard(dy.device().index);
  [[maybe_unused]] const bool cutlass = cutlass_selected();
#ifdef BB_WITH_CUTLASS
  if (cutlass && cutlass_takes(ExpertGemm::WeightGrad, dy.dtype(), dw[0].dtype(), x.size(1), dy.size(1), dy.size(0), {&dy, &x},
                    dw)) {
    std::vector<ExpertGemmGroup> groups;
    for (size_t g = 0; g < dw.size(); ++g) {
      const int64_t first = offsets[g], rows = offsets[g + 1] - first;
      Tensor dw_g = dw[g];
      if (rows == 0) {
        scale_by_beta(dw_g, beta);
        continue;
      }
      groups.push_back({int(dy.size(1)), int(x.size(1)), int(rows), dy.narrow(first, rows).raw(),
                        x.narrow(first, rows).raw(), dw_g.raw()});
    }
    cutlass_grouped_gemm(ExpertGemm::WeightGrad, dw[0].dtype(), groups, float(alpha), float(beta));
    return;
  }
#endif
  std::vector<Problem> problems;
  for (size_t g = 0; g < dw.size(); ++g) {
    const int64_t first = offsets[g], rows = offsets[g + 1] - first;
    Tensor dw_g = dw[g];
    if (rows == 0) {
      scale_by_beta(dw_g, beta);
      continue;
    }
    problems.push_back(row_major_problem(dy.narrow(first, rows), true, x.narrow(first, rows), false, dw_g, rows));
  }
  run(problems, dy.dtype(), dw[0].dtype(), alpha, beta, dy.device());
}

}  // namespace bb::cuda
