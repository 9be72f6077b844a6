// The register-side pieces of the sm_90a flash attention backward
// (flash_backward_sm90_kernel.cuh, flash_backward_sm90_wide.cuh): P and dS
// from the S and dP accumulators (transposed or not), P or dS into shared
// memory, a consumer's dQ tile into shared memory in register order (and where
// each of its elements sits, for the conversion), and the dK / dV stores from
// (key, column) or transposed (column, key) accumulators.
//
// In a wgmma accumulator each thread holds two rows and, in every 8-column
// block, two adjacent columns (flash_forward_sm90_softmax.cuh); registers
// 2i and 2i + 1 are such a column pair, which the bf16 stores and the float2
// atomics below rely on.
#pragma once

#include <cuda_bf16.h>

#include <cute/tensor.hpp>

#include "bumblebee/ops/cuda/cutlass/flash_forward_sm90_softmax.cuh"

namespace bb::cuda::flash_sm90 {

// Sets to -inf the scores of keys at or past len_kv and, when causal, of keys
// past the query's diagonal (query i sees keys j <= i + shift); `coords`
// gives each register's (key, query) in the tile, whose first key is n0 and
// first query m0.
template <class Scores, class Coords>
__device__ __forceinline__ void mask_scores_t(Scores& s, const Coords& coords, int n0, int m0, int len_kv,
                                              bool causal, int shift) {
#pragma unroll
  for (int i = 0; i < cute::size(s); ++i) {
    const int key = n0 + int(cute::get<0>(coords(i)));
    const int query = m0 + int(cute::get<1>(coords(i)));
    if (key >= len_kv || (causal && key > query + shift)) s(i) = -INFINITY;
  }
}

// P = exp2(S * scale_log2 - lse) in place of the scores, then
// dS = P (dP - dsum) in place of dP, with lse and dsum of each register's
// query (mode kQueryMode of its `coords`: 1 in the transposed (key, query)
// tiles, 0 in (query, key) ones) from shared memory. Masked scores (-inf) and
// rows with lse +inf give P = 0 and so dS = 0.
template <int kQueryMode, class Scores, class Grads, class Coords>
__device__ __forceinline__ void probs_and_grads(Scores& s, Grads& dp, const Coords& coords, float scale_log2,
                                                const float* lse, const float* dsum) {
#pragma unroll
  for (int i = 0; i < cute::size(s); ++i) {
    const int query = int(cute::get<kQueryMode>(coords(i)));
    s(i) = exp2_ftz(fmaf(s(i), scale_log2, -lse[query]));
    dp(i) = s(i) * (dp(i) - dsum[query]);
  }
}

// fp32 accumulator registers rounded to bf16 pairs, register for register.
template <class Acc, class Packed>
__device__ __forceinline__ void pack_bf16(const Acc& a, Packed& p) {
  auto* out = reinterpret_cast<__nv_bfloat162*>(cute::raw_pointer_cast(p.data()));
#pragma unroll
  for (int i = 0; i < cute::size(a) / 2; ++i) out[i] = __floats2bfloat162_rn(a(2 * i), a(2 * i + 1));
}

// P or dS (bf16 pairs from pack_bf16, the query of each register in mode
// kQueryMode of `coords`, its key in the other) into shared memory indexed
// (query, key). A pair is two adjacent accumulator columns: two queries in
// the transposed tiles, stored into a queries-contiguous layout, two keys
// otherwise, into a keys-contiguous one; either way adjacent there.
template <int kQueryMode, class Packed, class Coords, class SmemTensor>
__device__ __forceinline__ void store_packed(const Packed& x, const Coords& coords, SmemTensor& smem) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(cute::raw_pointer_cast(x.data()));
#pragma unroll
  for (int i = 0; i < cute::size(x); i += 2) {
    const int query = int(cute::get<kQueryMode>(coords(i))), key = int(cute::get<1 - kQueryMode>(coords(i)));
    *reinterpret_cast<__nv_bfloat162*>(&smem(query, key)) = pairs[i / 2];
  }
}

// A consumer's dQ accumulator (64 x N: N / 2 registers a thread) into its
// shared-memory tile in register order: register group j (registers
// 4j .. 4j + 3) of warpgroup thread t at floats 4 (128 j + t), so each warp
// stores 512 contiguous bytes per group. dq_accum keeps this order; the
// conversion places each group by dq_tile_group.
template <class Acc>
__device__ __forceinline__ void store_dq_tile(const Acc& dq, float* tile, int wg_thread) {
  auto* dst = reinterpret_cast<float4*>(tile) + wg_thread;
#pragma unroll
  for (int j = 0; j < cute::size(dq) / 4; ++j)
    dst[j * 128] = make_float4(dq(4 * j), dq(4 * j + 1), dq(4 * j + 2), dq(4 * j + 3));
}

// Where store_dq_tile's float4 number `e` (group e / 128 of warpgroup thread
// e % 128) lies in the 64-row tile: warp w of the warpgroup holds rows
// 16w .. 16w + 15, and lane l of it, in group j, the column pair
// 8j + 2 (l % 4) + {0, 1} of row 16w + l / 4 (the float4's x, y) and of the
// row 8 below (z, w).
struct DqTileGroup {
  int row, col;  // of x; z is at (row + 8, col)
};
__device__ __forceinline__ DqTileGroup dq_tile_group(int e) {
  const int thread = e % 128, lane = thread % 32;
  return {16 * (thread / 32) + lane / 4, 8 * (e / 128) + 2 * (lane % 4)};
}

// A column pair as bf16 (dK, dV) or fp32 (a group part's dK, dV).
__device__ __forceinline__ void store_pair(cutlass::bfloat16_t* dst, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(float* dst, float a, float b) {
  *reinterpret_cast<float2*>(dst) = make_float2(a, b);
}

// A scalar as bf16 or fp32.
__device__ __forceinline__ void store_value(cutlass::bfloat16_t* dst, float a) {
  *reinterpret_cast<__nv_bfloat16*>(dst) = __float2bfloat16_rn(a);
}
__device__ __forceinline__ void store_value(float* dst, float a) { *dst = a; }

// dK or dV rows (keys inside the sequence) from registers, times `scale`.
template <int D, class Out, class Acc, class Coords>
__device__ __forceinline__ void store_key_rows(Out* out, const Acc& acc, const Coords& coords, int64_t kv_start,
                                               int n0, int len_kv, int heads_kv, int kv_head, float scale) {
#pragma unroll
  for (int i = 0; i < cute::size(acc); i += 2) {
    const int key = n0 + int(cute::get<0>(coords(i)));
    if (key >= len_kv) continue;
    const int col = int(cute::get<1>(coords(i)));
    store_pair(out + ((kv_start + key) * heads_kv + kv_head) * D + col, acc(i) * scale, acc(i + 1) * scale);
  }
}

// dK or dV from transposed accumulators (`coords`: (column, key)), keys
// inside the sequence, times `scale`: adjacent registers are adjacent keys,
// a row apart in memory, so each value is its own store.
template <int D, class Out, class Acc, class Coords>
__device__ __forceinline__ void store_key_cols(Out* out, const Acc& acc, const Coords& coords, int64_t kv_start,
                                               int n0, int len_kv, int heads_kv, int kv_head, float scale) {
#pragma unroll
  for (int i = 0; i < cute::size(acc); ++i) {
    const int key = n0 + int(cute::get<1>(coords(i)));
    if (key >= len_kv) continue;
    const int col = int(cute::get<0>(coords(i)));
    store_value(out + ((kv_start + key) * heads_kv + kv_head) * D + col, acc(i) * scale);
  }
}

}  // namespace bb::cuda::flash_sm90
