// Column gather on CUDA, y[:, j] = x[:, index[j]], and its adjoint, the
// scatter-add of columns dx[:, c] (+)= sum of dy[:, j] over index[j] = c.
//
// A thread owns one group of W consecutive columns of the matrix it writes
// (W = 16 bytes of elements when every row start is 16-byte aligned, else 1)
// and walks rows with a grid stride: a 2D grid, x over column groups, y over
// rows. It reads its part of the column map once, before the row loop, and
// decides there whether its W sources are one aligned run, so that the
// common case (MLA's per-head splits copy runs of 64 or 128 columns) is one
// 16-byte load and one 16-byte store a row, with no index arithmetic in the
// loop; a group whose sources are scattered (the rope de-interleave) loads
// its W elements one by one and still stores 16 bytes. The scatter is a
// gather through the inverse index (ops::ColumnIndex): each dx element sums
// its output columns in ascending order, without atomics, so a repeated
// index (k_rope broadcast to every head) gives the same bits on every run.
#include <type_traits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill every multiprocessor a few times; beyond that each
// thread takes more rows, reusing the column map it has already read.
constexpr int kBlocksPerSM = 16;

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

// W consecutive elements, accessed as one aligned load or store.
template <typename T, int W>
struct alignas(sizeof(T) * W) Vec {
  T v[W];
};

template <typename T, int W>
__device__ __forceinline__ Vec<T, W> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, W>*>(p);
}

template <typename T, int W>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, W>& v) {
  *reinterpret_cast<Vec<T, W>*>(p) = v;
}

// ---- CUDA kernels -----------------------------------------------------------------------

// Output columns [g W, g W + W) of y [rows, out]; W divides in and out.
template <typename T, int W>
__global__ void gather_columns_kernel(const T* __restrict__ x, const int64_t* __restrict__ index, int64_t rows,
                                      int in, int out, T* __restrict__ y) {
  const int g = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (g * W >= out) return;
  int src[W];
  bool run = true;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    src[k] = int(index[g * W + k]);
    run = run && src[k] == src[0] + k;
  }
  run = run && src[0] % W == 0;
  // Unrolled so that each thread has several rows' loads in flight.
#pragma unroll 2
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += int64_t(gridDim.y) * blockDim.y) {
    const T* xr = x + r * in;
    Vec<T, W> v;
    if (run) {
      v = load_vec<T, W>(xr + src[0]);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) v.v[k] = xr[src[k]];
    }
    store_vec<T, W>(y + r * out + g * W, v);
  }
}

// Input columns [g W, g W + W) of dx [rows, in]: dx = (accumulate ? dx : 0) +
// the sum of dy's columns that read each, in ascending order. The group is
// `uniform` when its W columns have the same number of readers and the p-th
// readers form one aligned run for every p (a plain split: one reader each;
// the k_rope broadcast: one per head), so each p is one 16-byte load.
template <typename T, int W>
__global__ void scatter_add_columns_kernel(const T* __restrict__ dy, const int64_t* __restrict__ offsets,
                                           const int64_t* __restrict__ columns, int64_t rows, int in, int out,
                                           bool accumulate, T* __restrict__ dx) {
  const int g = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  const int c0 = g * W;
  if (c0 >= in) return;
  int begin[W], count[W];
  bool uniform = true, unread = true;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    begin[k] = int(offsets[c0 + k]);
    count[k] = int(offsets[c0 + k + 1]) - begin[k];
    uniform = uniform && count[k] == count[0];
    unread = unread && count[k] == 0;
  }
  // No reader: dx + 0 is dx (up to the sign of a zero), so leave it untouched.
  if (unread && accumulate) return;
  for (int p = 0; uniform && p < count[0]; ++p) {
    const int j = int(columns[begin[0] + p]);
    bool run = j % W == 0;
#pragma unroll
    for (int k = 1; k < W; ++k) run = run && int(columns[begin[k] + p]) == j + k;
    uniform = run;
  }
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += int64_t(gridDim.y) * blockDim.y) {
    const T* dyr = dy + r * out;
    T* dxr = dx + r * in + c0;
    Acc<T> sum[W];
#pragma unroll
    for (int k = 0; k < W; ++k) sum[k] = 0;
    if (uniform) {
      // Unrolled so that several readers' loads are in flight (the k_rope
      // broadcast has one per head).
#pragma unroll 8
      for (int p = 0; p < count[0]; ++p) {
        const Vec<T, W> v = load_vec<T, W>(dyr + columns[begin[0] + p]);
#pragma unroll
        for (int k = 0; k < W; ++k) sum[k] += to_acc(v.v[k]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k)
        for (int p = begin[k]; p < begin[k] + count[k]; ++p) sum[k] += to_acc(dyr[columns[p]]);
    }
    Vec<T, W> v;
    if (accumulate) v = load_vec<T, W>(dxr);
#pragma unroll
    for (int k = 0; k < W; ++k) v.v[k] = from_acc<T>(accumulate ? to_acc(v.v[k]) + sum[k] : sum[k]);
    store_vec<T, W>(dxr, v);
  }
}

// ---- kernel launchers ---------------------------------------------------------------------

// wide [N, in] and narrow [N, out] against the index (ops_elementwise.cpp checks the same;
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
  // The kernels index within a row in int32 (rows are int64).
  BB_CHECK(index.in < (int64_t(1) << 30) && index.out() < (int64_t(1) << 30), op, ": ", index.in, " -> ",
           index.out(), " columns exceed the kernels' 2^30");
}

// The launch over `groups` column groups (threads in x) and `rows` (threads
// and blocks in y, grid-stride beyond kBlocksPerSM blocks per multiprocessor).
struct Launch {
  dim3 grid, block;
};

Launch launch_for(int64_t rows, int64_t groups) {
  const int bx = int(groups < kThreads ? groups : kThreads), by = kThreads / bx;
  const int64_t gx = (groups + bx - 1) / bx, row_blocks = (rows + by - 1) / by;
  int64_t cap = int64_t(device_properties().multiProcessorCount) * kBlocksPerSM / gx;
  if (cap < 1) cap = 1;
  if (cap > 65535) cap = 65535;
  return {dim3(unsigned(gx), unsigned(row_blocks < cap ? row_blocks : cap)), dim3(unsigned(bx), unsigned(by))};
}

// 16-byte groups when W divides both widths and both matrices start 16-byte
// aligned (every row start then is), else one element a thread.
template <typename T>
bool vectorizes(const Tensor& a, const Tensor& b) {
  constexpr int64_t W = Pack16<T>::N;
  return a.size(1) % W == 0 && b.size(1) % W == 0 && aligned16(a.raw()) && aligned16(b.raw());
}

}  // namespace

void gather_columns(const Tensor& x, const ops::ColumnIndex& index, Tensor& y) {
  const char* op = "gather_columns";
  check_column_gather(op, x, y, index);
  const int64_t rows = x.size(0), in = x.size(1), out = y.size(1);
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto width) {
      constexpr int W = decltype(width)::value;
      const Launch l = launch_for(rows, out / W);
      gather_columns_kernel<T, W><<<l.grid, l.block, 0, stream>>>(static_cast<const T*>(x.raw()),
                                                                  index.index.data<int64_t>(), rows, int(in),
                                                                  int(out), static_cast<T*>(y.raw()));
    };
    if (vectorizes<T>(x, y)) run(std::integral_constant<int, Pack16<T>::N>{});
    else run(std::integral_constant<int, 1>{});
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
  dispatch_floating(dx.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto width) {
      constexpr int W = decltype(width)::value;
      const Launch l = launch_for(rows, in / W);
      scatter_add_columns_kernel<T, W><<<l.grid, l.block, 0, stream>>>(
          static_cast<const T*>(dy.raw()), index.inverse_offsets.data<int64_t>(),
          index.inverse_columns.data<int64_t>(), rows, int(in), int(out), accumulate, static_cast<T*>(dx.raw()));
    };
    if (vectorizes<T>(dx, dy)) run(std::integral_constant<int, Pack16<T>::N>{});
    else run(std::integral_constant<int, 1>{});
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
