// Rotary position embedding (rotate-half layout of HF Llama/Qwen), forward and
// backward (the rotation by the negative angle).
//
// One block per token: the block computes cos/sin of its position once into
// shared memory and applies them to every head, so the transcendental work is
// per token, not per element. As in HF transformers, the angle is the fp32
// product position * inv_freq, and cos/sin are rounded to the activation dtype
// before use; the rotation itself is fp32 with one rounding at the end. The
// angle, cos/sin and the rotation of a pair are rope_common.cuh's, shared with
// the fused RMSNorm + RoPE kernels (rmsnorm_rope.cu).
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/rope_common.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 128;

// x, out: [tokens, heads, 2 * half]; out may alias x (each thread reads both
// elements of its pairs before writing them). sign = -1 rotates backwards.
template <typename T, typename I, bool VEC>
__global__ void rope_kernel(const T* x, const I* __restrict__ positions, const __grid_constant__ rope::Frequencies freq,
                            int64_t heads, int half, float sign, T* out) {
  __shared__ float cos_s[rope::kMaxFrequencies], sin_s[rope::kMaxFrequencies];
  const int64_t token = blockIdx.x;
  const float pos = float(positions[token]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope::cos_sin<T>(freq, pos, i, sign, cos_s[i], sin_s[i]);
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
      ra[j] = rope::rotate_lo(a[j], b[j], c, s);
      rb[j] = rope::rotate_hi(a[j], b[j], c, s);
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

void rotate(const char* op, const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, float sign,
            Tensor& out) {
  check_cuda(x, op, "x");
  check_cuda_same(x, position_ids, op, "position_ids");
  check_cuda_same(x, out, op, "out");
  BB_CHECK(x.dim() == 3, op, ": x must be [N, heads, D], got ", shape_str(x.shape()));
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  BB_CHECK(dim % 2 == 0, op, ": head dimension ", dim, " is odd");
  const int half = int(dim / 2);
  const rope::Frequencies freq = rope::frequencies(inv_freq, half, x, op);
  check_shape(position_ids, {tokens}, "rope: position_ids");
  check_shape(out, x.shape(), "rope: out");
  BB_CHECK(out.dtype() == x.dtype(), op, ": out is ", dtype_name(out.dtype()), " but x is ", dtype_name(x.dtype()));
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
  rotate("rope_forward", x, position_ids, inv_freq, 1.0f, out);
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx) {
  rotate("rope_backward", dy, position_ids, inv_freq, -1.0f, dx);
}

}  // namespace bb::cuda
