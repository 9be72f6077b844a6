// Fused RMSNorm over the last dimension, forward and backward, fp32 math.
//
// One warp per row: rows are at most a few thousand elements, so a warp
// covers one with a handful of 16-byte loads per lane and reduces with
// shuffles, no shared memory or block barrier. The weight gradient is summed
// over rows: each block accumulates its rows into a shared-memory partial,
// writes it once, and a second kernel adds the per-block partials column by
// column into dw, so global memory sees no atomics at all.
#include <algorithm>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;

// Calls f(col, count) for this lane's columns of a row of n: groups of 8 when
// VEC, single columns otherwise.
template <bool VEC, typename F>
__device__ __forceinline__ void for_lane_columns(int64_t n, int lane, F f) {
  if constexpr (VEC) {
    for (int64_t c = int64_t(lane) * 8; c < n; c += 32 * 8) f(c);
  } else {
    for (int64_t c = lane; c < n; c += 32) f(c);
  }
}

template <typename T, bool VEC>
__device__ __forceinline__ void load_cols(const T* p, float (&v)[8]) {
  if constexpr (VEC) load8(p, v);
  else v[0] = to_float(*p);
}

template <typename T, bool VEC>
__device__ __forceinline__ void store_cols(T* p, const float (&v)[8]) {
  if constexpr (VEC) store8(p, v);
  else *p = from_float<T>(v[0]);
}

template <typename T, bool VEC>
__global__ void rmsnorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, float eps, int64_t rows,
                                       int64_t n, T* __restrict__ y, float* __restrict__ rstd) {
  constexpr int W = VEC ? 8 : 1;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const T* xr = x + row * n;
  T* yr = y + row * n;
  float ss = 0.f;
  for_lane_columns<VEC>(n, lane, [&](int64_t c) {
    float v[8];
    load_cols<T, VEC>(xr + c, v);
#pragma unroll
    for (int i = 0; i < W; ++i) ss += v[i] * v[i];
  });
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(n) + eps);
  if (lane == 0) rstd[row] = r;
  for_lane_columns<VEC>(n, lane, [&](int64_t c) {
    float v[8], g[8], out[8];
    load_cols<T, VEC>(xr + c, v);
    load_cols<T, VEC>(w + c, g);
    // x * rstd is rounded to the activation dtype before the weight
    // multiply, as HF transformers does.
#pragma unroll
    for (int i = 0; i < W; ++i) out[i] = g[i] * to_float(from_float<T>(v[i] * r));
    store_cols<T, VEC>(yr + c, out);
  });
}

// Shared-memory index of column c in the dw partial: one float of padding per
// 32 spreads a lane's 8 consecutive columns (lanes 8 apart) over all banks.
__device__ __forceinline__ int64_t padded(int64_t c) { return c + (c >> 5); }

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * rstd;
// dw_partial[block] = sum over the block's rows of dy * xhat (xhat rounded
// as in the forward).
template <typename T, bool VEC>
__global__ void rmsnorm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                                        const float* __restrict__ rstd, int64_t rows, int64_t n, T* __restrict__ dx,
                                        float* __restrict__ dw_partials) {
  extern __shared__ float dw_acc[];  // [padded(n)]
  constexpr int W = VEC ? 8 : 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) dw_acc[padded(c)] = 0.f;
  __syncthreads();
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + warp; row < rows;
       row += int64_t(gridDim.x) * kWarpsPerBlock) {
    const T* xr = x + row * n;
    const T* dyr = dy + row * n;
    const float r = rstd[row];
    float dot = 0.f;  // sum of g * xhat over the row
    for_lane_columns<VEC>(n, lane, [&](int64_t c) {
      float xv[8], gv[8], wv[8];
      load_cols<T, VEC>(xr + c, xv);
      load_cols<T, VEC>(dyr + c, gv);
      load_cols<T, VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const float xhat = xv[i] * r;
        dot += gv[i] * wv[i] * xhat;
        atomicAdd(&dw_acc[padded(c + i)], gv[i] * to_float(from_float<T>(xhat)));
      }
    });
    dot = warp_sum(dot);
    const float mean_dot = dot / float(n);
    for_lane_columns<VEC>(n, lane, [&](int64_t c) {
      float xv[8], gv[8], wv[8], out[8];
      load_cols<T, VEC>(xr + c, xv);
      load_cols<T, VEC>(dyr + c, gv);
      load_cols<T, VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < W; ++i) out[i] = r * (gv[i] * wv[i] - xv[i] * r * mean_dot);
      store_cols<T, VEC>(dx + row * n + c, out);
    });
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) dw_partials[int64_t(blockIdx.x) * n + c] = dw_acc[padded(c)];
}

// dw[c] += sum over blocks of dw_partials[b][c]; one thread per column.
__global__ void sum_partials_kernel(const float* __restrict__ partials, int nblocks, int64_t n, float* __restrict__ dw) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n; c += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int b = 0; b < nblocks; ++b) s += partials[int64_t(b) * n + c];
    dw[c] += s;
  }
}

int64_t row_count(const Tensor& x, int64_t n) { return n == 0 ? 0 : x.numel() / n; }

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  check_cuda(x, op, "x");
  check_cuda_same(x, w, op, "w");
  check_cuda_same(x, y, op, "y");
  check_cuda_same(x, rstd, op, "rstd");
  BB_CHECK(x.dim() >= 1, op, ": x must have a last dimension");
  const int64_t n = x.size(-1), rows = row_count(x, n);
  check_shape(w, {n}, "rmsnorm_forward: w");
  check_shape(y, x.shape(), "rmsnorm_forward: y");
  BB_CHECK(rstd.numel() == rows, op, ": rstd has ", rstd.numel(), " elements for ", rows, " rows");
  check_dtype(rstd, DType::F32, "rmsnorm_forward: rstd");
  BB_CHECK(w.dtype() == x.dtype() && y.dtype() == x.dtype(), op, ": x, w, y must share a dtype, got ",
           dtype_name(x.dtype()), ", ", dtype_name(w.dtype()), ", ", dtype_name(y.dtype()));
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  BB_CHECK(blocks <= INT32_MAX, op, ": too many rows (", rows, ")");
  dispatch_activation(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.raw());
    const T* pw = static_cast<const T*>(w.raw());
    T* py = static_cast<T*>(y.raw());
    float* pr = static_cast<float*>(rstd.raw());
    if (n % 8 == 0 && aligned16(px) && aligned16(pw) && aligned16(py)) {
      rmsnorm_forward_kernel<T, true><<<unsigned(blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
    } else {
      rmsnorm_forward_kernel<T, false><<<unsigned(blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
    }
  });
  CUDA_CHECK_LAUNCH(op);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx, Tensor& dw) {
  const char* op = "rmsnorm_backward";
  check_cuda(x, op, "x");
  check_cuda_same(x, dy, op, "dy");
  check_cuda_same(x, w, op, "w");
  check_cuda_same(x, rstd, op, "rstd");
  check_cuda_same(x, dx, op, "dx");
  check_cuda_same(x, dw, op, "dw");
  BB_CHECK(x.dim() >= 1, op, ": x must have a last dimension");
  const int64_t n = x.size(-1), rows = row_count(x, n);
  check_shape(w, {n}, "rmsnorm_backward: w");
  check_shape(dy, x.shape(), "rmsnorm_backward: dy");
  check_shape(dx, x.shape(), "rmsnorm_backward: dx");
  check_shape(dw, {n}, "rmsnorm_backward: dw");
  BB_CHECK(rstd.numel() == rows, op, ": rstd has ", rstd.numel(), " elements for ", rows, " rows");
  check_dtype(rstd, DType::F32, "rmsnorm_backward: rstd");
  check_dtype(dw, DType::F32, "rmsnorm_backward: dw");
  BB_CHECK(w.dtype() == x.dtype() && dy.dtype() == x.dtype() && dx.dtype() == x.dtype(), op,
           ": dy, x, w, dx must share a dtype, got ", dtype_name(dy.dtype()), ", ", dtype_name(x.dtype()), ", ",
           dtype_name(w.dtype()), ", ", dtype_name(dx.dtype()));
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const size_t smem = size_t(n + n / 32 + 1) * sizeof(float);
  BB_CHECK(smem <= size_t(device_properties().sharedMemPerBlockOptin), op, ": rows of ", n,
           " elements exceed the shared memory of one block");
  const int64_t row_blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int blocks = int(std::min<int64_t>(row_blocks, int64_t(device_properties().multiProcessorCount) * 2));
  Tensor partials = Tensor::empty({int64_t(blocks), n}, DType::F32, x.device());
  dispatch_activation(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = static_cast<const T*>(dy.raw());
    const T* px = static_cast<const T*>(x.raw());
    const T* pw = static_cast<const T*>(w.raw());
    T* pdx = static_cast<T*>(dx.raw());
    auto launch = [&](auto kernel) {
      if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<blocks, kThreads, smem, stream>>>(pdy, px, pw, static_cast<const float*>(rstd.raw()), rows, n, pdx,
                                                 static_cast<float*>(partials.raw()));
    };
    if (n % 8 == 0 && aligned16(pdy) && aligned16(px) && aligned16(pw) && aligned16(pdx)) {
      launch(rmsnorm_backward_kernel<T, true>);
    } else {
      launch(rmsnorm_backward_kernel<T, false>);
    }
  });
  CUDA_CHECK_LAUNCH(op);
  sum_partials_kernel<<<grid_for(n, 256), 256, 0, stream>>>(static_cast<const float*>(partials.raw()), blocks, n,
                                                            static_cast<float*>(dw.raw()));
  CUDA_CHECK_LAUNCH("rmsnorm_backward (dw)");
}

}  // namespace bb::cuda
