// The pieces of rotary position embedding that rope.cu and the fused
// RMSNorm + RoPE kernels (rmsnorm_rope.cu) share, so that a fused kernel
// rotates to rope.cu's bits: inv_freq as a kernel receives it, cos/sin of
// one angle rounded as HF rounds them, and the rotation of one pair.
//
// The rotation's two products and one sum are written as explicit fma and
// mul: left to the compiler, `a * c - b * s` may be contracted into an fma
// either way, and not necessarily the same way in two kernels.
#pragma once

#include <vector>

#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda::rope {

constexpr int kMaxFrequencies = 512;  // head_dim up to 1024

// inv_freq as a kernel receives it: values by value when they came from the
// host (no copy, no sync), or a device pointer. Kernels take it as a
// __grid_constant__ parameter, so reading it by reference makes no copy.
struct Frequencies {
  const void* device = nullptr;
  bool device_is_double = false;
  float host[kMaxFrequencies];
};

// inv_freq [half] (float64 or float32, on the host or the device of x) for op's kernels.
inline Frequencies frequencies(const Tensor& inv_freq, int64_t half, const Tensor& x, const char* op) {
  BB_CHECK(half <= kMaxFrequencies, op, ": head dimension ", 2 * half, " is above the CUDA limit of ",
           2 * kMaxFrequencies);
  BB_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) == half, op, ": inv_freq has shape ",
           shape_str(inv_freq.shape()), ", expected [", half, "]");
  check_dtype_in(inv_freq, op, "inv_freq", {DType::F64, DType::F32});
  Frequencies freq;
  if (inv_freq.device().is_cpu()) {
    std::vector<double> v = inv_freq.to_doubles();
    for (int64_t i = 0; i < half; ++i) freq.host[i] = float(v[size_t(i)]);
  } else {
    check_cuda_same(x, inv_freq, op, "inv_freq");
    freq.device = inv_freq.raw();
    freq.device_is_double = inv_freq.dtype() == DType::F64;
  }
  return freq;
}

// cos and sign * sin of the angle position * inv_freq[i]: the angle is the
// fp32 product, and cos/sin are rounded to the activation dtype T before
// use, as in HF transformers (cos.to(x.dtype)). sign = -1 rotates backwards.
template <typename T>
__device__ __forceinline__ void cos_sin(const Frequencies& freq, float position, int i, float sign, float& c,
                                        float& s) {
  float f;
  if (freq.device) {
    f = freq.device_is_double ? float(static_cast<const double*>(freq.device)[i])
                              : static_cast<const float*>(freq.device)[i];
  } else {
    f = freq.host[i];
  }
  float sv, cv;
  sincosf(position * f, &sv, &cv);
  c = to_float(from_float<T>(cv));
  s = sign * to_float(from_float<T>(sv));
}

// The pair (lo, hi) = (x[i], x[i + D/2]) rotated by (c, s):
//   rotate_lo = lo c - hi s,  rotate_hi = hi c + lo s.
__device__ __forceinline__ float rotate_lo(float lo, float hi, float c, float s) {
  return __fmaf_rn(lo, c, -__fmul_rn(hi, s));
}
__device__ __forceinline__ float rotate_hi(float lo, float hi, float c, float s) {
  return __fmaf_rn(hi, c, __fmul_rn(lo, s));
}

}  // namespace bb::cuda::rope
