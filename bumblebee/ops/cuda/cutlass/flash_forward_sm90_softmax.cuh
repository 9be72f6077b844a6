// The register-side pieces of the sm_90a flash attention forward
// (flash_forward_sm90_kernel.cuh): masking, the online softmax and the
// output rescale on wgmma accumulators, and the bf16 packing of P into the
// A operand of O += P V.
//
// The accumulator of an m64nNk16 wgmma gives each thread of the warpgroup two
// rows, g and g + 8 of its warp's 16 (g = lane / 4), and in each row the
// columns 2t and 2t + 1 (t = lane % 4) of every 8-column block. Register i
// holds column-pair element i % 2 of row (i / 2) % 2 in block i / 4, so a row
// is spread over the four threads of a quad and reduces with two shuffles.
// The A-from-registers layout of the next wgmma (k16 steps) is the same
// pattern with blocks paired, which is why P needs no shuffles.
#pragma once

#include <cuda_bf16.h>

#include <cute/tensor.hpp>

#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda::flash_sm90 {

// kLog2e, kLn2 and exp2_ftz (ex2.approx.ftz: a probability below 2^-126 adds
// nothing to a bf16 product) are cuda_common.cuh's, as the other softmax
// kernels use them.

// Sets to -inf the scores of keys at or past len_kv and, when causal, of keys
// past the row's diagonal (query row i sees keys j <= i + shift). `coords`
// gives each register's (row, column) in the tile, whose first query row is
// row0 and first key key0. Keys past len_kv are the next sequence's rows (or
// TMA's zero fill past the tensor), so this mask is what keeps them out.
template <class Scores, class Coords>
__device__ __forceinline__ void mask_scores(Scores& s, const Coords& coords, int row0, int key0, int len_kv,
                                            bool causal, int shift) {
#pragma unroll
  for (int i = 0; i < cute::size(s); ++i) {
    const int row = row0 + int(cute::get<0>(coords(i)));
    const int key = key0 + int(cute::get<1>(coords(i)));
    if (key >= len_kv || (causal && key > row + shift)) s(i) = -INFINITY;
  }
}

// Running statistics of this thread's two rows: the max of the scaled scores
// (log2 units) and this thread's share of the sum of exp2(score - max).
struct RowStats {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.f, 0.f};
};

// One online-softmax step on a tile of raw scores: the new running max, the
// factor `correction` by which what was accumulated under the old max must be
// scaled, and P = exp2(score * scale_log2 - max) in place of the scores.
template <class Scores>
__device__ __forceinline__ void softmax_step(Scores& s, float scale_log2, RowStats& stats, float (&correction)[2]) {
  constexpr int kN = decltype(cute::size(s))::value;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 2 * r; i < kN; i += 4) mx = fmaxf(mx, fmaxf(s(i), s(i + 1)));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(stats.max[r], mx * scale_log2);
    // A row with every key so far masked keeps max -inf; subtracting 0
    // instead keeps exp2 at exactly 0 rather than NaN.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    correction[r] = exp2_ftz(stats.max[r] - m_use);
    stats.max[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int i = 2 * r; i < kN; i += 4) {
      s(i) = exp2_ftz(fmaf(s(i), scale_log2, -m_use));
      s(i + 1) = exp2_ftz(fmaf(s(i + 1), scale_log2, -m_use));
      sum += s(i) + s(i + 1);
    }
    stats.sum[r] = stats.sum[r] * correction[r] + sum;
  }
}

// O *= correction per row (the accumulator has the score layout).
template <class Acc>
__device__ __forceinline__ void rescale_rows(Acc& o, const float (&correction)[2]) {
#pragma unroll
  for (int i = 0; i < cute::size(o); ++i) o(i) *= correction[(i >> 1) & 1];
}

// P (fp32) rounded to bf16 pairs, register for register.
template <class Probs, class Packed>
__device__ __forceinline__ void pack_probs(const Probs& s, Packed& p) {
  auto* out = reinterpret_cast<__nv_bfloat162*>(cute::raw_pointer_cast(p.data()));
#pragma unroll
  for (int i = 0; i < cute::size(s) / 2; ++i) out[i] = __floats2bfloat162_rn(s(2 * i), s(2 * i + 1));
}

// The row sums over the quad; rows with nothing to sum (no key seen) get 0.
__device__ __forceinline__ void reduce_row_sums(RowStats& stats) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    stats.sum[r] += __shfl_xor_sync(0xffffffffu, stats.sum[r], 1);
    stats.sum[r] += __shfl_xor_sync(0xffffffffu, stats.sum[r], 2);
  }
}

}  // namespace bb::cuda::flash_sm90
