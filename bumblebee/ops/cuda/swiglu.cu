// SwiGLU: out = silu(gate) * up over gate_up = [gate | up], and its backward.
//
// Rows are [N, 2F] with gate in columns [0, F) and up in [F, 2F); one thread
// handles 8 columns of one row with 16-byte loads when F allows it.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

template <typename T, int W>
__device__ __forceinline__ void load_w(const T* p, float (&v)[8]) {
  if constexpr (W == 8) load8(p, v);
  else v[0] = to_float(*p);
}

template <typename T, int W>
__device__ __forceinline__ void store_w(T* p, const float (&v)[8]) {
  if constexpr (W == 8) store8(p, v);
  else *p = from_float<T>(v[0]);
}

template <typename T, int W>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate_up, int64_t rows, int64_t f, T* __restrict__ out) {
  const int64_t groups_per_row = f / W;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / groups_per_row, col = (g % groups_per_row) * W;
    float gate[8], up[8], o[8];
    load_w<T, W>(gate_up + row * 2 * f + col, gate);
    load_w<T, W>(gate_up + row * 2 * f + f + col, up);
#pragma unroll
    for (int i = 0; i < W; ++i) o[i] = gate[i] * sigmoid(gate[i]) * up[i];
    store_w<T, W>(out + row * f + col, o);
  }
}

// d_gate = dout * up * s * (1 + gate * (1 - s)), d_up = dout * silu(gate), s = sigmoid(gate).
template <typename T, int W>
__global__ void swiglu_backward_kernel(const T* __restrict__ dout, const T* __restrict__ gate_up, int64_t rows,
                                       int64_t f, T* __restrict__ d_gate_up) {
  const int64_t groups_per_row = f / W;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / groups_per_row, col = (g % groups_per_row) * W;
    float gate[8], up[8], d[8], dg[8], du[8];
    load_w<T, W>(gate_up + row * 2 * f + col, gate);
    load_w<T, W>(gate_up + row * 2 * f + f + col, up);
    load_w<T, W>(dout + row * f + col, d);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const float s = sigmoid(gate[i]);
      dg[i] = d[i] * up[i] * s * (1.f + gate[i] * (1.f - s));
      du[i] = d[i] * gate[i] * s;
    }
    store_w<T, W>(d_gate_up + row * 2 * f + col, dg);
    store_w<T, W>(d_gate_up + row * 2 * f + f + col, du);
  }
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, Tensor& out) {
  const char* op = "swiglu_forward";
  check_cuda(gate_up, op, "gate_up");
  check_cuda_same(gate_up, out, op, "out");
  BB_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, op, ": gate_up must be [N, 2F], got ",
           shape_str(gate_up.shape()));
  const int64_t rows = gate_up.size(0), f = gate_up.size(1) / 2;
  check_shape(out, {rows, f}, "swiglu_forward: out");
  BB_CHECK(out.dtype() == gate_up.dtype(), op, ": out is ", dtype_name(out.dtype()), " but gate_up is ",
           dtype_name(gate_up.dtype()));
  if (rows * f == 0) return;
  DeviceGuard guard(gate_up.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(gate_up.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* gu = static_cast<const T*>(gate_up.raw());
    T* o = static_cast<T*>(out.raw());
    if (f % 8 == 0 && aligned16(gu) && aligned16(o)) {
      swiglu_forward_kernel<T, 8><<<grid_for(rows * f / 8, kThreads), kThreads, 0, stream>>>(gu, rows, f, o);
    } else {
      swiglu_forward_kernel<T, 1><<<grid_for(rows * f, kThreads), kThreads, 0, stream>>>(gu, rows, f, o);
    }
  });
  CUDA_CHECK_LAUNCH(op);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& d_gate_up) {
  const char* op = "swiglu_backward";
  check_cuda(gate_up, op, "gate_up");
  check_cuda_same(gate_up, dout, op, "dout");
  check_cuda_same(gate_up, d_gate_up, op, "d_gate_up");
  BB_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, op, ": gate_up must be [N, 2F], got ",
           shape_str(gate_up.shape()));
  const int64_t rows = gate_up.size(0), f = gate_up.size(1) / 2;
  check_shape(dout, {rows, f}, "swiglu_backward: dout");
  check_shape(d_gate_up, gate_up.shape(), "swiglu_backward: d_gate_up");
  BB_CHECK(dout.dtype() == gate_up.dtype() && d_gate_up.dtype() == gate_up.dtype(), op,
           ": dout, gate_up, d_gate_up must share a dtype");
  if (rows * f == 0) return;
  DeviceGuard guard(gate_up.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(gate_up.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* d = static_cast<const T*>(dout.raw());
    const T* gu = static_cast<const T*>(gate_up.raw());
    T* dgu = static_cast<T*>(d_gate_up.raw());
    if (f % 8 == 0 && aligned16(d) && aligned16(gu) && aligned16(dgu)) {
      swiglu_backward_kernel<T, 8><<<grid_for(rows * f / 8, kThreads), kThreads, 0, stream>>>(d, gu, rows, f, dgu);
    } else {
      swiglu_backward_kernel<T, 1><<<grid_for(rows * f, kThreads), kThreads, 0, stream>>>(d, gu, rows, f, dgu);
    }
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
