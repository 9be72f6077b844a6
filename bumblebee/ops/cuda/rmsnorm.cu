// Fused RMSNorm over the last dimension, forward and backward, fp32 math.
//
// One warp per row: rows are at most a few thousand elements, so a warp
// covers one with a handful of 16-byte loads per lane and reduces with
// shuffles, no shared memory or block barrier. The weight gradient is summed
// over rows in a fixed order, so it repeats bitwise: each warp accumulates its
// rows into its own shared-memory slice (a lane owns fixed columns, so no
// atomics), the block adds its warps' slices in warp order into one partial,
// and a second kernel adds the per-block partials column by column into dw.
// A slice is a row of floats, so the backward's warps per block shrink as
// rows grow (on an H200: 8 up to n = 3.5k, 6 at n = 4096, 3 at n = 8192).
//
// The kernels take x's dtype (TX, also dx's) apart from w's (TW, also y's and
// dy's), so a float32 residual stream (Megatron's fp32_residual_connection)
// can be normalised into bfloat16 activations. A lane's 8-column group is one
// 16-byte access in bfloat16 and two in float32 (load8/store8).
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

// TX is the dtype of x (and dx), TW that of w (and y, dy): equal, or float32
// x with bfloat16 w when the residual stream is kept in float32.
template <typename TX, typename TW, bool VEC>
__global__ void rmsnorm_forward_kernel(const TX* __restrict__ x, const TW* __restrict__ w, float eps, int64_t rows,
                                       int64_t n, TW* __restrict__ y, float* __restrict__ rstd) {
  constexpr int W = VEC ? 8 : 1;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const TX* xr = x + row * n;
  TW* yr = y + row * n;
  float ss = 0.f;
  for_lane_columns<VEC>(n, lane, [&](int64_t c) {
    float v[8];
    load_cols<TX, VEC>(xr + c, v);
#pragma unroll
    for (int i = 0; i < W; ++i) ss += v[i] * v[i];
  });
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(n) + eps);
  if (lane == 0) rstd[row] = r;
  for_lane_columns<VEC>(n, lane, [&](int64_t c) {
    float v[8], g[8], out[8];
    load_cols<TX, VEC>(xr + c, v);
    load_cols<TW, VEC>(w + c, g);
    // x * rstd is rounded to x's dtype before the weight multiply, as HF
    // transformers does (the identity for a float32 x).
#pragma unroll
    for (int i = 0; i < W; ++i) out[i] = g[i] * to_float(from_float<TX>(v[i] * r));
    store_cols<TW, VEC>(yr + c, out);
  });
}

// Shared-memory index of column c in a dw slice: one float of padding per
// 32 spreads a lane's 8 consecutive columns (lanes 8 apart) over all banks.
__device__ __host__ __forceinline__ int64_t padded(int64_t c) { return c + (c >> 5); }

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * rstd;
// dw_partial[block] = sum over the block's rows of dy * xhat (xhat rounded
// to x's dtype as in the forward). TX types x and dx, TW types dy and w.
// Row r goes to warp r % (gridDim.x * warps) whatever the timing, and every
// sum runs in row order within a warp, then warp order: the result is fixed.
template <typename TX, typename TW, bool VEC>
__global__ void rmsnorm_backward_kernel(const TW* __restrict__ dy, const TX* __restrict__ x, const TW* __restrict__ w,
                                        const float* __restrict__ rstd, int64_t rows, int64_t n, TX* __restrict__ dx,
                                        float* __restrict__ dw_partials) {
  extern __shared__ float dw_acc[];  // [warps][padded(n) + 1]
  constexpr int W = VEC ? 8 : 1;
  const int warps = int(blockDim.x >> 5);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t slice = padded(n) + 1;
  float* my_acc = dw_acc + warp * slice;
  for (int64_t c = threadIdx.x; c < int64_t(warps) * slice; c += blockDim.x) dw_acc[c] = 0.f;
  __syncthreads();
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < rows; row += int64_t(gridDim.x) * warps) {
    const TX* xr = x + row * n;
    const TW* dyr = dy + row * n;
    const float r = rstd[row];
    float dot = 0.f;  // sum of g * xhat over the row
    for_lane_columns<VEC>(n, lane, [&](int64_t c) {
      float xv[8], gv[8], wv[8];
      load_cols<TX, VEC>(xr + c, xv);
      load_cols<TW, VEC>(dyr + c, gv);
      load_cols<TW, VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const float xhat = xv[i] * r;
        dot += gv[i] * wv[i] * xhat;
        my_acc[padded(c + i)] += gv[i] * to_float(from_float<TX>(xhat));
      }
    });
    dot = warp_sum(dot);
    const float mean_dot = dot / float(n);
    for_lane_columns<VEC>(n, lane, [&](int64_t c) {
      float xv[8], gv[8], wv[8], out[8];
      load_cols<TX, VEC>(xr + c, xv);
      load_cols<TW, VEC>(dyr + c, gv);
      load_cols<TW, VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < W; ++i) out[i] = r * (gv[i] * wv[i] - xv[i] * r * mean_dot);
      store_cols<TX, VEC>(dx + row * n + c, out);
    });
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < warps; ++k) s += dw_acc[k * slice + padded(c)];
    dw_partials[int64_t(blockIdx.x) * n + c] = s;
  }
}

// dw[c] += sum over blocks of dw_partials[b][c]; one thread per column. A
// bfloat16 dw (optimizer.main_grads_dtype=bf16) is rounded once, after the
// fp32 sum is added to it.
template <typename TG>
__global__ void sum_partials_kernel(const float* __restrict__ partials, int nblocks, int64_t n, TG* __restrict__ dw) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n; c += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int b = 0; b < nblocks; ++b) s += partials[int64_t(b) * n + c];
    dw[c] = from_float<TG>(to_float(dw[c]) + s);
  }
}

int64_t row_count(const Tensor& x, int64_t n) { return n == 0 ? 0 : x.numel() / n; }

// x and w share a dtype (bfloat16 or float32), or x is float32 (the fp32
// residual stream) with w bfloat16.
void check_x_w_dtypes(DType x, DType w, const char* op) {
  const bool same = x == w && (x == DType::BF16 || x == DType::F32);
  BB_CHECK(same || (x == DType::F32 && w == DType::BF16), op,
           ": CUDA takes x and w both bfloat16 or both float32, or x float32 with w bfloat16; got x ",
           dtype_name(x), ", w ", dtype_name(w));
}

// Calls f(TX{}, TW{}) for dtypes check_x_w_dtypes accepted.
template <typename F>
void dispatch_x_w(DType x, DType w, const char* op, F&& f) {
  if (x == DType::F32 && w == DType::BF16) f(float{}, bf16{});
  else dispatch_activation(x, op, [&](auto tag) { f(tag, tag); });
}

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
  check_x_w_dtypes(x.dtype(), w.dtype(), op);
  BB_CHECK(y.dtype() == w.dtype(), op, ": y is ", dtype_name(y.dtype()), " but w is ", dtype_name(w.dtype()),
           "; y takes w's dtype");
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  BB_CHECK(blocks <= INT32_MAX, op, ": too many rows (", rows, ")");
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    const TX* px = static_cast<const TX*>(x.raw());
    const TW* pw = static_cast<const TW*>(w.raw());
    TW* py = static_cast<TW*>(y.raw());
    float* pr = static_cast<float*>(rstd.raw());
    if (n % 8 == 0 && aligned16(px) && aligned16(pw) && aligned16(py)) {
      rmsnorm_forward_kernel<TX, TW, true>
          <<<unsigned(blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
    } else {
      rmsnorm_forward_kernel<TX, TW, false>
          <<<unsigned(blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
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
  check_dtype_in(dw, op, "dw", {DType::F32, DType::BF16});
  check_x_w_dtypes(x.dtype(), w.dtype(), op);
  BB_CHECK(dx.dtype() == x.dtype() && dy.dtype() == w.dtype(), op, ": dx takes x's dtype and dy w's, got dy ",
           dtype_name(dy.dtype()), ", x ", dtype_name(x.dtype()), ", w ", dtype_name(w.dtype()), ", dx ",
           dtype_name(dx.dtype()));
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  // Up to 8 warps per block, as many as leave two blocks' dw slices (and the
  // shared memory the driver reserves per block) room in one SM: the grid is
  // two blocks per SM.
  const size_t slice_bytes = size_t(padded(n) + 1) * sizeof(float);
  const size_t smem_budget = std::min<size_t>(device_properties().sharedMemPerBlockOptin,
                                              device_properties().sharedMemPerMultiprocessor / 2 -
                                                  device_properties().reservedSharedMemPerBlock);
  BB_CHECK(slice_bytes <= size_t(device_properties().sharedMemPerBlockOptin), op, ": rows of ", n,
           " elements exceed the shared memory of one block");
  const int warps = int(std::clamp<size_t>(smem_budget / slice_bytes, 1, kWarpsPerBlock));
  const size_t smem = slice_bytes * size_t(warps);
  const int64_t row_blocks = (rows + warps - 1) / warps;
  const int blocks = int(std::min<int64_t>(row_blocks, int64_t(device_properties().multiProcessorCount) * 2));
  Tensor partials = Tensor::empty({int64_t(blocks), n}, DType::F32, x.device());
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    const TW* pdy = static_cast<const TW*>(dy.raw());
    const TX* px = static_cast<const TX*>(x.raw());
    const TW* pw = static_cast<const TW*>(w.raw());
    TX* pdx = static_cast<TX*>(dx.raw());
    auto launch = [&](auto kernel) {
      if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<blocks, warps * 32, smem, stream>>>(pdy, px, pw, static_cast<const float*>(rstd.raw()), rows, n, pdx,
                                                 static_cast<float*>(partials.raw()));
    };
    if (n % 8 == 0 && aligned16(pdy) && aligned16(px) && aligned16(pw) && aligned16(pdx)) {
      launch(rmsnorm_backward_kernel<TX, TW, true>);
    } else {
      launch(rmsnorm_backward_kernel<TX, TW, false>);
    }
  });
  CUDA_CHECK_LAUNCH(op);
  const float* pp = static_cast<const float*>(partials.raw());
  if (dw.dtype() == DType::BF16)
    sum_partials_kernel<<<grid_for(n, 256), 256, 0, stream>>>(pp, blocks, n, static_cast<bf16*>(dw.raw()));
  else
    sum_partials_kernel<<<grid_for(n, 256), 256, 0, stream>>>(pp, blocks, n, static_cast<float*>(dw.raw()));
  CUDA_CHECK_LAUNCH("rmsnorm_backward (dw)");
}

}  // namespace bb::cuda
