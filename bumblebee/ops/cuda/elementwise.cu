// Elementwise ops: add, add_ (accumulate, dtypes may differ), scale_, mul.
//
// Every kernel works on groups of 8 elements with 16-byte loads when the
// tensors allow it (length a multiple of 8, pointers 16-byte aligned), and
// falls back to one element per thread otherwise. Arithmetic is fp32.
// Binary kernels take a's dtype (TA, also out's) apart from b's (TB), so add
// can put a bfloat16 branch output onto a float32 residual stream; a group of
// 8 is one 16-byte access in bfloat16 and two in float32 (load8/store8).
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

// out = f(a, b), out of a's dtype; a (or b, when it shares the dtype) may alias out.
template <typename TA, typename TB, typename F>
__global__ void binary_vec8_kernel(const TA* a, const TB* b, TA* out, int64_t ngroups, F f) {
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < ngroups; g += int64_t(gridDim.x) * blockDim.x) {
    float x[8], y[8], r[8];
    load8(a + g * 8, x);
    load8(b + g * 8, y);
#pragma unroll
    for (int i = 0; i < 8; ++i) r[i] = f(x[i], y[i]);
    store8(out + g * 8, r);
  }
}

template <typename TA, typename TB, typename F>
__global__ void binary_kernel(const TA* a, const TB* b, TA* out, int64_t n, F f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<TA>(f(to_float(a[i]), to_float(b[i])));
}

// acc = acc + alpha * x, acc and x of their own dtypes.
template <typename TA, typename TX>
__global__ void axpy_vec8_kernel(TA* acc, const TX* x, float alpha, int64_t ngroups) {
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < ngroups; g += int64_t(gridDim.x) * blockDim.x) {
    float a[8], v[8];
    load8(acc + g * 8, a);
    load8(x + g * 8, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = fmaf(alpha, v[i], a[i]);
    store8(acc + g * 8, a);
  }
}

template <typename TA, typename TX>
__global__ void axpy_kernel(TA* acc, const TX* x, float alpha, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc[i] = from_float<TA>(fmaf(alpha, to_float(x[i]), to_float(acc[i])));
}

template <typename T>
__global__ void scale_vec8_kernel(T* x, float s, int64_t ngroups) {
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < ngroups; g += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    load8(x + g * 8, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] *= s;
    store8(x + g * 8, v);
  }
}

template <typename T>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_float<T>(to_float(x[i]) * s);
}

struct AddOp {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct MulOp {
  __device__ float operator()(float x, float y) const { return x * y; }
};

constexpr int kThreads = 256;

// a, b, out share a dtype; with kF32ABf16B, a and out may instead be float32
// with b bfloat16.
template <bool kF32ABf16B, typename F>
void launch_binary(const char* op, const Tensor& a, const Tensor& b, Tensor& out, F f) {
  check_cuda(a, op, "a");
  check_cuda_same(a, b, op, "b");
  check_cuda_same(a, out, op, "out");
  check_shape(b, a.shape(), op);
  check_shape(out, a.shape(), op);
  const bool mixed = kF32ABf16B && a.dtype() == DType::F32 && b.dtype() == DType::BF16;
  BB_CHECK((a.dtype() == b.dtype() || mixed) && out.dtype() == a.dtype(), op,
           kF32ABf16B ? ": a, b, out must share a dtype, or a and out be float32 with b bfloat16; got a "
                      : ": a, b, out must share a dtype, got a ",
           dtype_name(a.dtype()), ", b ", dtype_name(b.dtype()), ", out ", dtype_name(out.dtype()));
  const int64_t n = a.numel();
  if (n == 0) return;
  DeviceGuard guard(a.device().index);
  cudaStream_t stream = current_stream();
  auto launch = [&](auto atag, auto btag) {
    using TA = decltype(atag);
    using TB = decltype(btag);
    const TA* pa = static_cast<const TA*>(a.raw());
    const TB* pb = static_cast<const TB*>(b.raw());
    TA* po = static_cast<TA*>(out.raw());
    if (n % 8 == 0 && aligned16(pa) && aligned16(pb) && aligned16(po)) {
      binary_vec8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, stream>>>(pa, pb, po, n / 8, f);
    } else {
      binary_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(pa, pb, po, n, f);
    }
  };
  if (mixed) {
    if constexpr (kF32ABf16B) launch(float{}, bf16{});  // only add instantiates the mixed kernels
  } else {
    dispatch_activation(a.dtype(), op, [&](auto tag) { launch(tag, tag); });
  }
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace

// add also takes a float32 a with a bfloat16 b: the fp32 residual stream plus
// a bfloat16 branch output.
void add(const Tensor& a, const Tensor& b, Tensor& out) { launch_binary<true>("add", a, b, out, AddOp{}); }

void mul(const Tensor& a, const Tensor& b, Tensor& out) { launch_binary<false>("mul", a, b, out, MulOp{}); }

void add_(Tensor& acc, const Tensor& x, double alpha) {
  check_cuda(acc, "add_", "acc");
  check_cuda_same(acc, x, "add_", "x");
  BB_CHECK(acc.numel() == x.numel(), "add_: acc ", shape_str(acc.shape()), " and x ", shape_str(x.shape()),
           " differ in size");
  const int64_t n = acc.numel();
  if (n == 0) return;
  DeviceGuard guard(acc.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(acc.dtype(), "add_", [&](auto acc_tag) {
    using TA = decltype(acc_tag);
    dispatch_activation(x.dtype(), "add_", [&](auto x_tag) {
      using TX = decltype(x_tag);
      TA* pa = static_cast<TA*>(acc.raw());
      const TX* px = static_cast<const TX*>(x.raw());
      if (n % 8 == 0 && aligned16(pa) && aligned16(px)) {
        axpy_vec8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, stream>>>(pa, px, float(alpha), n / 8);
      } else {
        axpy_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(pa, px, float(alpha), n);
      }
    });
  });
  CUDA_CHECK_LAUNCH("add_");
}

void scale_(Tensor& x, double s) {
  check_cuda(x, "scale_", "x");
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(x.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(x.raw());
    if (n % 8 == 0 && aligned16(p)) {
      scale_vec8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, stream>>>(p, float(s), n / 8);
    } else {
      scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(p, float(s), n);
    }
  });
  CUDA_CHECK_LAUNCH("scale_");
}

}  // namespace bb::cuda
