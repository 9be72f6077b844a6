// Rotary position embedding (rotate-half layout of HF Llama/Qwen), forward and
// backward (the rotation by the negative angle).
//
// One block per token: the block computes cos/sin of its position once into
// shared memory and applies them to every head, so the transcendental work is
// per token, not per element. As in HF transformers, the angle is the fp32
// product position * inv_freq, and cos/sin are rounded to the activation dtype
// before use; the rotation itself is fp32 with one rounding at the end.
#include <vector>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxFrequencies = 512;  // head_dim up to 1024

// inv_freq as the kernel receives it: values by value when they came from the
// host (no copy, no sync), or a device pointer.
struct Frequencies {
  const void* device = nullptr;
  bool device_is_double = false;
  float host[kMaxFrequencies];
};

// x, out: [tokens, heads, 2 * half]; out may alias x (each thread reads both
// elements of its pairs before writing them). sign = -1 rotates backwards.
template <typename T, typename I, bool VEC>
__global__ void rope_kernel(const T* x, const I* __restrict__ positions, const Frequencies freq, int64_t heads,
                            int half, float sign, T* out) {
  __shared__ float cos_s[kMaxFrequencies], sin_s[kMaxFrequencies];
  const int64_t token = blockIdx.x;
  const float pos = float(positions[token]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float f;
    if (freq.device) {
      f = freq.device_is_double ? float(static_cast<const double*>(freq.device)[i])
                                : static_cast<const float*>(freq.device)[i];
    } else {
      f = freq.host[i];
    }
    float s, c;
    sincosf(pos * f, &s, &c);
    cos_s[i] = to_float(from_float<T>(c));
    sin_s[i] = sign * to_float(from_float<T>(s));
  }
  __syncthreads();
  const int64_t dim = 2 * int64_t(half);
  const T* xt = x + token * heads * dim;
  T* ot = out + token * heads * dim;
  constexpr int W = VEC ? 8 : 1;
  const int64_t groups_per_head = half / W;
  for (int64_t g = threadIdx.x; g < heads * groups_per_head; g += blockDim.x) {
    const int64_t h = g / groups_per_head;
    const int i0 = int(g % groups_per_head) * W;
    const T* lo = xt + h * dim + i0;
    const T* hi = lo + half;
    float a[8], b[8], ra[8], rb[8];
    if constexpr (VEC) {
      load8(lo, a);
      load8(hi, b);
    } else {
      a[0] = to_float(*lo);
      b[0] = to_float(*hi);
    }
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float c = cos_s[i0 + j], s = sin_s[i0 + j];
      ra[j] = a[j] * c - b[j] * s;
      rb[j] = b[j] * c + a[j] * s;
    }
    T* olo = ot + h * dim + i0;
    if constexpr (VEC) {
      store8(olo, ra);
      store8(olo + half, rb);
    } else {
      olo[0] = from_float<T>(ra[0]);
      olo[half] = from_float<T>(rb[0]);
    }
  }
}

void rope(const char* op, const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, float sign,
          Tensor& out) {
  check_cuda(x, op, "x");
  check_cuda_same(x, position_ids, op, "position_ids");
  check_cuda_same(x, out, op, "out");
  BB_CHECK(x.dim() == 3, op, ": x must be [N, heads, D], got ", shape_str(x.shape()));
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  BB_CHECK(dim % 2 == 0, op, ": head dimension ", dim, " is odd");
  const int half = int(dim / 2);
  BB_CHECK(half <= kMaxFrequencies, op, ": head dimension ", dim, " is above the CUDA limit of ",
           2 * kMaxFrequencies);
  check_shape(position_ids, {tokens}, "rope: position_ids");
  check_shape(inv_freq, {int64_t(half)}, "rope: inv_freq");
  check_shape(out, x.shape(), "rope: out");
  BB_CHECK(out.dtype() == x.dtype(), op, ": out is ", dtype_name(out.dtype()), " but x is ", dtype_name(x.dtype()));
  check_dtype_in(inv_freq, op, "inv_freq", {DType::F64, DType::F32});
  Frequencies freq;
  if (inv_freq.device().is_cpu()) {
    std::vector<double> v = inv_freq.to_doubles();
    for (int i = 0; i < half; ++i) freq.host[i] = float(v[size_t(i)]);
  } else {
    check_cuda_same(x, inv_freq, op, "inv_freq");
    freq.device = inv_freq.raw();
    freq.device_is_double = inv_freq.dtype() == DType::F64;
  }
  if (tokens == 0 || heads == 0 || half == 0) return;
  BB_CHECK(tokens <= INT32_MAX, op, ": too many tokens (", tokens, ")");
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(position_ids.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const T* px = static_cast<const T*>(x.raw());
      const I* pp = static_cast<const I*>(position_ids.raw());
      T* po = static_cast<T*>(out.raw());
      if (half % 8 == 0 && aligned16(px) && aligned16(po)) {
        rope_kernel<T, I, true><<<unsigned(tokens), kThreads, 0, stream>>>(px, pp, freq, heads, half, sign, po);
      } else {
        rope_kernel<T, I, false><<<unsigned(tokens), kThreads, 0, stream>>>(px, pp, freq, heads, half, sign, po);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out) {
  rope("rope_forward", x, position_ids, inv_freq, 1.0f, out);
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx) {
  rope("rope_backward", dy, position_ids, inv_freq, -1.0f, dx);
}

}  // namespace bb::cuda
