// Column gather on CUDA, y[:, j] = x[:, index[j]], and its adjoint, the
// scatter-add of columns dx[:, c] (+)= sum of dy[:, j] over index[j] = c.
//
// Each block takes a chunk of whole rows and its threads walk the chunk's
// elements in row-major order, so consecutive threads write consecutive
// columns of a row (coalesced stores; the gathered loads fall within one
// row, mostly in runs, as the per-head splits of MLA are). The scatter is a
// gather through the inverse index (ops::ColumnIndex): each dx element sums
// its output columns in ascending order, without atomics, so a repeated
// index (k_rope broadcast to every head) gives the same bits on every run.
#include <type_traits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kElementsPerChunk = 4 * kThreads;

// fp32 arithmetic for 16-bit and float32 data, fp64 for float64.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ Acc<T> to_acc(T x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return to_float(x);
}

template <typename T>
__device__ __forceinline__ T from_acc(Acc<T> x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return from_float<T>(x);
}

// ---- CUDA kernels -----------------------------------------------------------------------

// Rows [r0, r0 + rows_per_chunk) of y [rows, out] per block and step.
template <typename T>
__global__ void gather_columns_kernel(const T* __restrict__ x, const int64_t* __restrict__ index, int64_t rows,
                                      int64_t in, int64_t out, int64_t rows_per_chunk, T* __restrict__ y) {
  for (int64_t r0 = int64_t(blockIdx.x) * rows_per_chunk; r0 < rows; r0 += int64_t(gridDim.x) * rows_per_chunk) {
    const int64_t end = (r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows) * out;
    for (int64_t e = r0 * out + threadIdx.x; e < end; e += blockDim.x) {
      const int64_t r = e / out, j = e - r * out;
      y[e] = x[r * in + index[j]];
    }
  }
}

// Rows of dx [rows, in] per block and step; dx = (accumulate ? dx : 0) + the
// sum of dy's columns that read column c.
template <typename T>
__global__ void scatter_add_columns_kernel(const T* __restrict__ dy, const int64_t* __restrict__ offsets,
                                           const int64_t* __restrict__ columns, int64_t rows, int64_t in,
                                           int64_t out, int64_t rows_per_chunk, bool accumulate,
                                           T* __restrict__ dx) {
  for (int64_t r0 = int64_t(blockIdx.x) * rows_per_chunk; r0 < rows; r0 += int64_t(gridDim.x) * rows_per_chunk) {
    const int64_t end = (r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows) * in;
    for (int64_t e = r0 * in + threadIdx.x; e < end; e += blockDim.x) {
      const int64_t r = e / in, c = e - r * in;
      Acc<T> sum = 0;
      for (int64_t p = offsets[c]; p < offsets[c + 1]; ++p) sum += to_acc(dy[r * out + columns[p]]);
      dx[e] = from_acc<T>(accumulate ? to_acc(dx[e]) + sum : sum);
    }
  }
}

// ---- kernel launchers ---------------------------------------------------------------------

// wide [N, in] and narrow [N, out] against the index (ops.cpp checks the same;
// the harness calls these launchers directly).
void check_column_gather(const char* op, const Tensor& wide, const Tensor& narrow, const ops::ColumnIndex& index) {
  check_cuda(wide, op, "x/dx");
  check_cuda_same(wide, narrow, op, "y/dy");
  for (const Tensor* t : {&index.index, &index.inverse_offsets, &index.inverse_columns}) {
    check_cuda_same(wide, *t, op, "column index");
    check_dtype_in(*t, op, "column index", {DType::I64});
  }
  BB_CHECK(wide.dim() == 2 && narrow.dim() == 2 && wide.size(0) == narrow.size(0) && wide.size(1) == index.in &&
               narrow.size(1) == index.out() && index.inverse_offsets.numel() == index.in + 1 &&
               index.inverse_columns.numel() == index.out(),
           op, ": expected [N, ", index.in, "] and [N, ", index.out(), "], got ", shape_str(wide.shape()), " and ",
           shape_str(narrow.shape()));
  BB_CHECK(wide.dtype() == narrow.dtype(), op, ": x/dx is ", dtype_name(wide.dtype()), " but y/dy is ",
           dtype_name(narrow.dtype()));
}

// Whole rows per chunk, about kElementsPerChunk elements of `width` each.
int64_t rows_per_chunk(int64_t width) { return width >= kElementsPerChunk ? 1 : kElementsPerChunk / width; }

int chunk_blocks(int64_t rows, int64_t per_chunk) {
  return grid_for(((rows + per_chunk - 1) / per_chunk) * kThreads, kThreads);
}

}  // namespace

void gather_columns(const Tensor& x, const ops::ColumnIndex& index, Tensor& y) {
  const char* op = "gather_columns";
  check_column_gather(op, x, y, index);
  const int64_t rows = x.size(0), in = x.size(1), out = y.size(1);
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int64_t per_chunk = rows_per_chunk(out);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    gather_columns_kernel<T><<<chunk_blocks(rows, per_chunk), kThreads, 0, stream>>>(
        static_cast<const T*>(x.raw()), index.index.data<int64_t>(), rows, in, out, per_chunk,
        static_cast<T*>(y.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
}

void scatter_add_columns(const Tensor& dy, const ops::ColumnIndex& index, Tensor& dx, bool accumulate) {
  const char* op = "scatter_add_columns";
  check_column_gather(op, dx, dy, index);
  const int64_t rows = dx.size(0), in = dx.size(1), out = dy.size(1);
  if (rows == 0) return;
  DeviceGuard guard(dx.device().index);
  cudaStream_t stream = current_stream();
  const int64_t per_chunk = rows_per_chunk(in);
  dispatch_floating(dx.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    scatter_add_columns_kernel<T><<<chunk_blocks(rows, per_chunk), kThreads, 0, stream>>>(
        static_cast<const T*>(dy.raw()), index.inverse_offsets.data<int64_t>(),
        index.inverse_columns.data<int64_t>(), rows, in, out, per_chunk, accumulate, static_cast<T*>(dx.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
