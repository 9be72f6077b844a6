// Rotary position embedding (rotate-half layout of HF Llama/Qwen), forward and
// backward (the rotation by the negative angle), over tensors or over heads
// inside wider rows (ops::HeadsView: q or k inside a fused qkv).
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

// x, out: [tokens, heads, 2 * half], each token's heads x_stride (out_stride)
// elements after the previous token's: heads * 2 * half for a tensor, more
// for heads inside wider rows (rope::HeadRows). out may alias x (each thread
// reads both elements of its pairs before writing them). sign = -1 rotates
// backwards.
template <typename T, typename I, bool VEC>
__global__ void rope_kernel(const T* x, int64_t x_stride, const I* __restrict__ positions,
                            const __grid_constant__ rope::Frequencies freq, int64_t heads, int half, float sign, T* out,
                            int64_t out_stride) {
  __shared__ float cos_s[rope::kMaxFrequencies], sin_s[rope::kMaxFrequencies];
  const int64_t token = blockIdx.x;
  const float pos = float(positions[token]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope::cos_sin<T>(freq, pos, i, sign, cos_s[i], sin_s[i]);
  __syncthreads();
  const int64_t dim = 2 * int64_t(half);
  const T* xt = x + token * x_stride;
  T* ot = out + token * out_stride;
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

// out = x rotated by sign * angle, both [tokens, heads, D] through their row strides.
void rotate(const char* op, const ops::HeadsView& x, const Tensor& position_ids, const Tensor& inv_freq, float sign,
            const ops::HeadsView& out) {
  check_cuda(x.all, op, "x");
  check_cuda_same(x.all, position_ids, op, "position_ids");
  check_cuda_same(x.all, out.all, op, "out");
  BB_CHECK(x.all.dim() == 3 && out.all.dim() == 3, op, ": x and out must be [N, heads, D], got ",
           shape_str(x.all.shape()), " and ", shape_str(out.all.shape()));
  for (const ops::HeadsView* v : {&x, &out}) {
    BB_CHECK(v->first >= 0 && v->count >= 0 && v->first + v->count <= v->all.size(1), op, ": heads [", v->first,
             ", ", v->first + v->count, ") are not within ", shape_str(v->all.shape()));
  }
  const int64_t tokens = x.all.size(0), heads = x.count, dim = x.all.size(2);
  BB_CHECK(dim % 2 == 0, op, ": head dimension ", dim, " is odd");
  const int half = int(dim / 2);
  const rope::Frequencies freq = rope::frequencies(inv_freq, half, x.all, op);
  check_shape(position_ids, {tokens}, "rope: position_ids");
  BB_CHECK(out.all.size(0) == tokens && out.count == heads && out.all.size(2) == dim, op, ": out has ",
           out.all.size(0), " tokens of ", out.count, " heads of ", out.all.size(2), ", expected x's ", tokens, " of ",
           heads, " of ", dim);
  BB_CHECK(out.all.dtype() == x.all.dtype(), op, ": out is ", dtype_name(out.all.dtype()), " but x is ",
           dtype_name(x.all.dtype()));
  if (tokens == 0 || heads == 0 || half == 0) return;
  BB_CHECK(tokens <= INT32_MAX, op, ": too many tokens (", tokens, ")");
  DeviceGuard guard(x.all.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(x.all.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(position_ids.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const rope::HeadRows<T> xr(x), outr(out);
      const I* pp = static_cast<const I*>(position_ids.raw());
      // Both strides are whole heads of D = 2 * half elements: with half % 8
      // == 0, every token's heads stay on the 16-byte grid of the first.
      if (half % 8 == 0 && aligned16(xr.data) && aligned16(outr.data)) {
        rope_kernel<T, I, true><<<unsigned(tokens), kThreads, 0, stream>>>(xr.data, xr.stride, pp, freq, heads, half,
                                                                           sign, outr.data, outr.stride);
      } else {
        rope_kernel<T, I, false><<<unsigned(tokens), kThreads, 0, stream>>>(xr.data, xr.stride, pp, freq, heads, half,
                                                                            sign, outr.data, outr.stride);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

ops::HeadsView all_heads(const Tensor& x) { return {x, 0, x.dim() == 3 ? x.size(1) : 0}; }

}  // namespace

void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out) {
  rotate("rope_forward", all_heads(x), position_ids, inv_freq, 1.0f, all_heads(out));
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx) {
  rotate("rope_backward", all_heads(dy), position_ids, inv_freq, -1.0f, all_heads(dx));
}

void rope_forward(const ops::HeadsView& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out) {
  rotate("rope_forward", x, position_ids, inv_freq, 1.0f, all_heads(out));
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, const ops::HeadsView& dx) {
  rotate("rope_backward", all_heads(dy), position_ids, inv_freq, -1.0f, dx);
}

}  // namespace bb::cuda
