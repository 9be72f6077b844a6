// Reductions that return one number to the host: sum, sum of squares, count
// of zeros, all-finite; and the sum of squares with the zero count in one
// pass (the optimizer's gradient norm). Each is two kernels (block partials, then one block
// over the partials) and one device-to-host copy, the call's only sync. dot
// is the same two kernels with its result left in a device tensor.
//
// Accumulation is in double per thread and per block: these feed the global
// gradient norm and the loss report, where a billion-element fp32 sum would
// lose digits; the kernels stay memory-bound either way.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/core/cuda/cuda_memory.h"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

enum class Reduction { Sum, SumSquares, CountZeros, CountNonFinite };

template <Reduction R>
__device__ __forceinline__ double term(double v) {
  if constexpr (R == Reduction::Sum) return v;
  else if constexpr (R == Reduction::SumSquares) return v * v;
  else if constexpr (R == Reduction::CountZeros) return v == 0.0 ? 1.0 : 0.0;
  else return isfinite(v) ? 0.0 : 1.0;
}

template <typename T>
__device__ __forceinline__ double to_double(T x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return double(to_float(x));
}

constexpr int kThreads = 256;

// partials[blockIdx.x] = this block's share; `vectorised` means 16-byte loads
// over n / Pack16<T>::N whole packs.
template <typename T, Reduction R>
__global__ void reduce_partials_kernel(const T* __restrict__ x, int64_t n, bool vectorised, double* partials) {
  __shared__ double scratch[32];
  double acc = 0.0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vectorised) {
    constexpr int N = Pack16<T>::N;
    for (int64_t p = start; p < n / N; p += stride) {
      Pack16<T> pk = load_pack(x + p * N);
#pragma unroll
      for (int i = 0; i < N; ++i) acc += term<R>(to_double(pk.v[i]));
    }
  } else {
    for (int64_t i = start; i < n; i += stride) acc += term<R>(to_double(x[i]));
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// The sum of squares and the zero count of one block in one pass: squares
// and zeros are [gridDim.x] each.
template <typename T>
__global__ void squares_zeros_partials_kernel(const T* __restrict__ x, int64_t n, bool vectorised,
                                              double* squares, double* zeros) {
  __shared__ double scratch[32];
  double sq = 0.0, zc = 0.0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vectorised) {
    constexpr int N = Pack16<T>::N;
    for (int64_t p = start; p < n / N; p += stride) {
      Pack16<T> pk = load_pack(x + p * N);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const double v = to_double(pk.v[i]);
        sq += term<Reduction::SumSquares>(v);
        zc += term<Reduction::CountZeros>(v);
      }
    }
  } else {
    for (int64_t i = start; i < n; i += stride) {
      const double v = to_double(x[i]);
      sq += term<Reduction::SumSquares>(v);
      zc += term<Reduction::CountZeros>(v);
    }
  }
  sq = block_sum(sq, scratch);
  zc = block_sum(zc, scratch);
  if (threadIdx.x == 0) {
    squares[blockIdx.x] = sq;
    zeros[blockIdx.x] = zc;
  }
}

template <typename T>
__global__ void dot_partials_kernel(const T* __restrict__ a, const T* __restrict__ b, int64_t n, double* partials) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += to_double(a[i]) * to_double(b[i]);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void reduce_final_kernel(const double* __restrict__ partials, int count, double* result) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *result = acc;
}

template <Reduction R>
double reduce(const Tensor& x, const char* op) {
  check_cuda(x, op, "x");
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int blocks = grid_for(n, kThreads);
  // partials[0, blocks) and the result after them, from the pool.
  Tensor scratch = Tensor::empty({int64_t(blocks) + 1}, DType::F64, x.device());
  double* partials = static_cast<double*>(scratch.raw());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.raw());
    bool vectorised = n % Pack16<T>::N == 0 && aligned16(p);
    reduce_partials_kernel<T, R><<<blocks, kThreads, 0, stream>>>(p, n, vectorised, partials);
  });
  CUDA_CHECK_LAUNCH(op);
  reduce_final_kernel<<<1, 1024, 0, stream>>>(partials, blocks, partials + blocks);
  CUDA_CHECK_LAUNCH(op);
  double result = 0.0;
  copy(&result, false, partials + blocks, true, sizeof(double), x.device().index);
  return result;
}

}  // namespace

double sum(const Tensor& x) { return reduce<Reduction::Sum>(x, "sum"); }

double sum_squares(const Tensor& x) { return reduce<Reduction::SumSquares>(x, "sum_squares"); }

int64_t count_zeros(const Tensor& x) { return int64_t(reduce<Reduction::CountZeros>(x, "count_zeros")); }

ops::SquaresAndZeros sum_squares_and_zeros(const Tensor& x) {
  const char* op = "sum_squares_and_zeros";
  check_cuda(x, op, "x");
  const int64_t n = x.numel();
  if (n == 0) return {};
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int blocks = grid_for(n, kThreads);
  // Both partial arrays, then the two results, from the pool: one copy back.
  Tensor scratch = Tensor::empty({2 * int64_t(blocks) + 2}, DType::F64, x.device());
  double* squares = static_cast<double*>(scratch.raw());
  double* zeros = squares + blocks;
  double* results = zeros + blocks;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.raw());
    const bool vectorised = n % Pack16<T>::N == 0 && aligned16(p);
    squares_zeros_partials_kernel<T><<<blocks, kThreads, 0, stream>>>(p, n, vectorised, squares, zeros);
  });
  CUDA_CHECK_LAUNCH(op);
  reduce_final_kernel<<<1, 1024, 0, stream>>>(squares, blocks, results);
  reduce_final_kernel<<<1, 1024, 0, stream>>>(zeros, blocks, results + 1);
  CUDA_CHECK_LAUNCH(op);
  double host[2] = {0.0, 0.0};
  copy(host, false, results, true, sizeof(host), x.device().index);
  return {host[0], int64_t(host[1])};
}

void dot(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "dot";
  check_cuda(a, op, "a");
  check_cuda_same(a, b, op, "b");
  check_cuda_same(a, out, op, "out");
  BB_CHECK(a.dtype() == b.dtype(), op, ": a and b differ in dtype (", dtype_name(a.dtype()), ", ",
           dtype_name(b.dtype()), ")");
  const int64_t n = a.numel();
  DeviceGuard guard(a.device().index);
  cudaStream_t stream = current_stream();
  const int blocks = grid_for(std::max<int64_t>(n, 1), kThreads);
  Tensor scratch = Tensor::empty({int64_t(blocks)}, DType::F64, a.device());
  double* partials = static_cast<double*>(scratch.raw());
  dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dot_partials_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(a.raw()),
                                                            static_cast<const T*>(b.raw()), n, partials);
  });
  CUDA_CHECK_LAUNCH(op);
  reduce_final_kernel<<<1, 1024, 0, stream>>>(partials, blocks, static_cast<double*>(out.raw()));
  CUDA_CHECK_LAUNCH(op);
}

bool all_finite(const Tensor& x) { return reduce<Reduction::CountNonFinite>(x, "all_finite") == 0.0; }

}  // namespace bb::cuda
