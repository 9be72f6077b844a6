// The pieces of the RMSNorm team kernels that rmsnorm.cu (also its residual
// add kernels) and the fused RMSNorm + RoPE kernels (rmsnorm_rope.cu) share,
// so that a fused kernel normalises a row with the same code, and so to the
// same bits, as rmsnorm.cu's team kernel of that row length.
//
// A team of T lanes (8, 16 or 32) owns one row of n elements at a time, and
// lane l holds the row's 8-column groups l, l + T, ..., l + (G - 1) T in
// registers (RowGroups). row_rstd and normalise are the forward's math on
// them, backward_row the backward's. A lane's share of dw sits in registers
// (RegisterDw) or, for long rows whose packs fill the registers, in its
// team's slice of shared memory (SharedDw); block_partial adds the teams'
// shares into one per-block partial in team order, and add_partials sums the
// blocks' partials into dw in a fixed order, so dw repeats bitwise.
// Also here: the x / w dtype pairs every RMSNorm kernel takes.
//
// The row math spells out its roundings (__fmul_rn, __fmaf_rn): left to the
// compiler, `a * b - c * d` may be contracted into an fma either way, and not
// necessarily the same way in two kernels that inline it. (Products of
// bfloat16 values are exact in fp32, which hides the difference; float32
// operands show it.)
#pragma once

#include <algorithm>

#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda::rmsnorm {

// Threads of a team backward block (one dw partial a block).
constexpr int kBackwardThreads = 128;

// The lanes of this thread's team within its warp, for the team's shuffles:
// teams of one warp may run different numbers of rows.
template <int T>
__device__ __forceinline__ unsigned team_mask() {
  if constexpr (T == 32) return 0xffffffffu;
  else return ((1u << T) - 1u) << ((threadIdx.x & 31) & ~(T - 1));
}

template <int T>
__device__ __forceinline__ float team_sum(float v, unsigned mask) {
#pragma unroll
  for (int off = T / 2; off > 0; off >>= 1) v += __shfl_xor_sync(mask, v, off);
  return v;
}

// Calls f(g, c) for each group g of lane `lane` (of a team of L lanes) that
// lies inside a row of n: columns [c, c + 8).
template <int L, int G, typename F>
__device__ __forceinline__ void for_lane_groups(int64_t n, int lane, F f) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int64_t c = (int64_t(g) * L + lane) * 8;
    if (c < n) f(g, c);
  }
}

// A row's G groups of this lane: raw 16-byte packs (two per group in float32).
template <typename T, int G>
struct RowGroups {
  static constexpr int kPacks = 8 / Pack16<T>::N;
  Pack16<T> p[G][kPacks];

  template <int L>
  __device__ __forceinline__ void load(const T* row, int64_t n, int lane) {
    for_lane_groups<L, G>(n, lane, [&](int g, int64_t c) {
#pragma unroll
      for (int k = 0; k < kPacks; ++k) p[g][k] = load_pack(row + c + k * Pack16<T>::N);
    });
  }
  __device__ __forceinline__ float at(int g, int i) const {
    return to_float(p[g][i / Pack16<T>::N].v[i % Pack16<T>::N]);
  }
};

// rstd = 1 / sqrt(mean(x^2) + eps) of the team's row: each lane sums the
// squares of its groups in column order, then the team adds the lanes'.
template <int T, int G, typename TX>
__device__ __forceinline__ float row_rstd(const RowGroups<TX, G>& xv, int64_t n, int lane, unsigned mask, float eps) {
  float ss = 0.f;
  for_lane_groups<T, G>(n, lane, [&](int g, int64_t) {
#pragma unroll
    for (int i = 0; i < 8; ++i) ss = __fmaf_rn(xv.at(g, i), xv.at(g, i), ss);
  });
  ss = team_sum<T>(ss, mask);
  return 1.0f / sqrtf(ss / float(n) + eps);
}

// One element of y = w * (x * rstd), with x * rstd rounded to x's dtype
// before the weight multiply, as HF transformers does (the identity for a
// float32 x).
template <typename TX>
__device__ __forceinline__ float normalise(float x, float r, float w) {
  return __fmul_rn(w, to_float(from_float<TX>(__fmul_rn(x, r))));
}

// A lane's share of dw held in registers: v[g][i] is column
// (g * T + lane) * 8 + i.
template <int G>
struct RegisterDw {
  float v[G][8];

  __device__ __forceinline__ RegisterDw() {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int i = 0; i < 8; ++i) v[g][i] = 0.f;
  }
  // v[g] += a * b, elementwise.
  __device__ __forceinline__ void fma(int g, int64_t, const float (&a)[8], const float (&b)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[g][i] = __fmaf_rn(a[i], b[i], v[g][i]);
  }
};

// A lane's share of dw in its team's slice of shared memory ([n] floats a
// team): the same fmas in the same order as RegisterDw, so the same bits,
// while the row's x and dy packs keep the registers. A lane only touches its
// own columns, so the slice needs no barrier until block_partial.
struct SharedDw {
  float* slice;

  __device__ __forceinline__ void zero(int64_t c) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    reinterpret_cast<float4*>(slice + c)[0] = z;
    reinterpret_cast<float4*>(slice + c)[1] = z;
  }
  __device__ __forceinline__ void fma(int, int64_t c, const float (&a)[8], const float (&b)[8]) {
    float4* p = reinterpret_cast<float4*>(slice + c);
    float4 lo = p[0], hi = p[1];
    lo.x = __fmaf_rn(a[0], b[0], lo.x), lo.y = __fmaf_rn(a[1], b[1], lo.y);
    lo.z = __fmaf_rn(a[2], b[2], lo.z), lo.w = __fmaf_rn(a[3], b[3], lo.w);
    hi.x = __fmaf_rn(a[4], b[4], hi.x), hi.y = __fmaf_rn(a[5], b[5], hi.y);
    hi.z = __fmaf_rn(a[6], b[6], hi.z), hi.w = __fmaf_rn(a[7], b[7], hi.w);
    p[0] = lo, p[1] = hi;
  }
};

// The backward of the team's row: dx = rstd * (g - xhat * mean(g * xhat))
// with g = dy * w and xhat = x * rstd, written to dx_row; the lane's share
// of dy * xhat (xhat rounded to x's dtype as in the forward) is added to
// dw. dy(g, i) is dy at column i of the lane's group g. With kResidual and
// a residual gradient row (add_rmsnorm_backward), dx is rounded to x's dtype, the
// residual gradient added and the sum rounded again: rmsnorm_backward's
// rounding, then add_'s. It is read where it is added, so that it takes no
// registers across the row (the bfloat16 rows of 2048 fill them).
template <typename TX, typename TW, int T, int G, bool kResidual = false, typename Dy, typename Dw>
__device__ __forceinline__ void backward_row(const RowGroups<TX, G>& xv, Dy dy, const TW* __restrict__ w, float r,
                                             int64_t n, int lane, unsigned mask, Dw& dw,
                                             TX* __restrict__ dx_row,
                                             const TX* __restrict__ residual_row = nullptr) {
  float dot = 0.f;  // sum of g * w * xhat over the row
  for_lane_groups<T, G>(n, lane, [&](int g, int64_t c) {
    float wv[8], dyv[8], xhat_rounded[8];
    load8(w + c, wv);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float xhat = __fmul_rn(xv.at(g, i), r);
      dyv[i] = dy(g, i);
      dot = __fmaf_rn(__fmul_rn(dyv[i], wv[i]), xhat, dot);
      xhat_rounded[i] = to_float(from_float<TX>(xhat));
    }
    dw.fma(g, c, dyv, xhat_rounded);
  });
  dot = team_sum<T>(dot, mask);
  const float mean_dot = dot / float(n);
  for_lane_groups<T, G>(n, lane, [&](int g, int64_t c) {
    float wv[8], out[8];
    load8(w + c, wv);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float xhat = __fmul_rn(xv.at(g, i), r);
      out[i] = __fmul_rn(r, __fmaf_rn(dy(g, i), wv[i], -__fmul_rn(xhat, mean_dot)));
    }
    if constexpr (kResidual) {
      float rv[8];
      load8(residual_row + c, rv);
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = __fadd_rn(to_float(from_float<TX>(out[i])), rv[i]);
    }
    store8(dx_row + c, out);
  });
}

// The block's dw partial [n]: the sum of its kTeams teams' shares in team
// order, written to `partial`. Every thread of the block must call it.
// Register shares go through block_dw [n] (shared memory), one team at a
// time; shared-memory shares are summed from their slices, in the same order.
template <int T, int G, int kTeams>
__device__ __forceinline__ void block_partial(const RegisterDw<G>& dw, int64_t n, int lane, int team,
                                              float* block_dw, float* __restrict__ partial) {
  for (int t = 0; t < kTeams; ++t) {
    if (team == t) {
      for_lane_groups<T, G>(n, lane, [&](int g, int64_t c) {
#pragma unroll
        for (int i = 0; i < 8; ++i) block_dw[c + i] = (t == 0 ? 0.f : block_dw[c + i]) + dw.v[g][i];
      });
    }
    __syncthreads();
  }
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) partial[c] = block_dw[c];
}

// slices: the block's kTeams slices of n floats, team after team.
template <int kTeams>
__device__ __forceinline__ void block_partial(const float* slices, int64_t n, float* __restrict__ partial) {
  __syncthreads();
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int t = 0; t < kTeams; ++t) s += slices[t * n + c];
    partial[c] = s;
  }
}

// dw[c] += the sum over blocks b of partials[b][c]. A block covers
// kSumColumns columns with kSumSlices threads each: slice k adds blocks k,
// k + kSumSlices, ... in order, then the slices are added in slice order, so
// the sum is fixed and a partial count in the thousands (short rows, many
// blocks) still spreads over many threads. A bfloat16 dw
// (optimizer.main_grads_dtype=bf16) is rounded once, after the fp32 sum is
// added to it.
constexpr int kSumColumns = 32, kSumSlices = 16;

template <typename TG>
__global__ void __launch_bounds__(kSumColumns * kSumSlices)
    sum_partials_kernel(const float* __restrict__ partials, int nblocks, int64_t n, TG* __restrict__ dw) {
  __shared__ float slice_sum[kSumSlices][kSumColumns];
  const int col = threadIdx.x % kSumColumns, slice = threadIdx.x / kSumColumns;
  const int64_t c = int64_t(blockIdx.x) * kSumColumns + col;
  float s = 0.f;
  if (c < n) {
#pragma unroll 8
    for (int b = slice; b < nblocks; b += kSumSlices) s += partials[int64_t(b) * n + c];
  }
  slice_sum[slice][col] = s;
  __syncthreads();
  if (slice != 0 || c >= n) return;
  float total = 0.f;
  for (int k = 0; k < kSumSlices; ++k) total += slice_sum[k][col];
  dw[c] = from_float<TG>(to_float(dw[c]) + total);
}

// dw (float32 or bfloat16, [n]) += the column sums of partials [blocks, n].
inline void add_partials(const Tensor& partials, Tensor& dw, cudaStream_t stream, const char* what) {
  const float* pp = static_cast<const float*>(partials.raw());
  const int nblocks = int(partials.size(0));
  const int64_t n = partials.size(1);
  const unsigned sum_blocks = unsigned((n + kSumColumns - 1) / kSumColumns);
  constexpr int kSumThreads = kSumColumns * kSumSlices;
  if (dw.dtype() == DType::BF16)
    sum_partials_kernel<<<sum_blocks, kSumThreads, 0, stream>>>(pp, nblocks, n, static_cast<bf16*>(dw.raw()));
  else
    sum_partials_kernel<<<sum_blocks, kSumThreads, 0, stream>>>(pp, nblocks, n, static_cast<float*>(dw.raw()));
  CUDA_CHECK_LAUNCH(what);
}

// Blocks for a team backward kernel over `rows`, kBackwardThreads threads
// and `smem` bytes of dynamic shared memory each: as many as are resident at
// once, each looping over its teams' rows so that its dw partial covers many
// rows, and no more than the rows need.
template <typename Kernel>
int backward_blocks(Kernel kernel, int64_t rows, int teams, size_t smem) {
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBackwardThreads, smem));
  const int sms = device_properties().multiProcessorCount;
  return int(std::min<int64_t>((rows + teams - 1) / teams, int64_t(sms) * std::max(per_sm, 1)));
}

// x and w share a dtype (bfloat16 or float32), or x is float32 (the fp32
// residual stream) with w bfloat16.
inline void check_x_w_dtypes(DType x, DType w, const char* op) {
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

}  // namespace bb::cuda::rmsnorm
