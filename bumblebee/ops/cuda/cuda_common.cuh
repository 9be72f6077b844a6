// Shared pieces of the CUDA kernels: warp and block reductions, 16-byte
// vector access, and the host-side checks and dtype dispatch every op
// launcher starts with (element conversions and grid sizing come from
// core/cuda/device_convert.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "bumblebee/core/tensor.h"
#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/cuda/device_convert.cuh"

namespace bb::cuda {

// ---- reductions ------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds 32 values.
// blockDim.x must be a multiple of 32.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < nwarps ? scratch[lane] : T(0);
  return warp_sum(total);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(m);
}

// ---- 16-byte vectors ----------------------------------------------------------------
// Pack of N elements of T occupying 16 bytes (8 bf16/half, 4 float, 2 double).
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};

template <typename T>
__device__ __forceinline__ Pack16<T> load_pack(const T* p) {
  Pack16<T> r;
  *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
  return r;
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack16<T>& r) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&r);
}

// Eight consecutive elements as floats, through 16-byte accesses; p must be
// 16-byte aligned.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8]) {
  constexpr int N = Pack16<T>::N;
#pragma unroll
  for (int j = 0; j < 8; j += N) {
    Pack16<T> pk = load_pack(p + j);
#pragma unroll
    for (int i = 0; i < N; ++i) f[j + i] = to_float(pk.v[i]);
  }
}

// kStream: evict-first stores (st.global.cs), for data written once that
// should not push out of L2 what the kernel still reads.
template <typename T, bool kStream = false>
__device__ __forceinline__ void store8(T* p, const float (&f)[8]) {
  constexpr int N = Pack16<T>::N;
#pragma unroll
  for (int j = 0; j < 8; j += N) {
    Pack16<T> pk;
#pragma unroll
    for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(f[j + i]);
    if constexpr (kStream) __stcs(reinterpret_cast<uint4*>(p + j), *reinterpret_cast<const uint4*>(&pk));
    else store_pack(p + j, pk);
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// A pack's elements as floats into x[0, N). bf16 widens exactly by a shift or
// a mask per pair of elements, one instruction less a pair than to_float on
// each half.
template <typename T>
__device__ __forceinline__ void unpack(const Pack16<T>& pk, float* x) {
  if constexpr (std::is_same_v<T, bf16>) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(pk.v);
#pragma unroll
    for (int j = 0; j < Pack16<T>::N / 2; ++j) {
      x[2 * j] = __uint_as_float(w[j] << 16);
      x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < Pack16<T>::N; ++i) x[i] = to_float(pk.v[i]);
  }
}

// ---- exponentials through MUFU.EX2 ----------------------------------------------------------
// exp(x) = 2^(x log2(e)): the softmax kernels take each term as one fma and
// one ex2.approx.ftz. exp2f would add a range fix for results below 2^-126,
// terms below fp32 resolution of the sums and zero in a bf16 gradient.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}


// ---- host-side checks -----------------------------------------------------------------
// Each op checks that its tensors live on CUDA, on one device, and runs there.
void check_cuda(const Tensor& t, const char* op, const char* name);
void check_cuda_same(const Tensor& a, const Tensor& b, const char* op, const char* name_b);
void check_dtype_in(const Tensor& t, const char* op, const char* name, std::initializer_list<DType> allowed);

// ---- dtype dispatch ------------------------------------------------------------------------
// Calls f(T{}) with T the element type of `dt`, for floating storage dtypes.
template <typename F>
void dispatch_floating(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::BF16: f(bf16{}); return;
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::F64: f(double{}); return;
    default: BB_FAIL(op, ": unsupported dtype ", dtype_name(dt), " on CUDA");
  }
}

// bfloat16 activations, or float32 for fp32 paths.
template <typename F>
void dispatch_activation(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::BF16: f(bf16{}); return;
    case DType::F32: f(float{}); return;
    default: BB_FAIL(op, ": CUDA supports bfloat16 and float32 here, got ", dtype_name(dt));
  }
}

template <typename F>
void dispatch_index(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    default: BB_FAIL(op, ": index tensor must be int32 or int64, got ", dtype_name(dt));
  }
}

}  // namespace bb::cuda
