// The per-query-row kernels around the sm_90a flash attention backward
// (flash_backward_sm90_launch.cuh): the row statistics it reads (lse in log2
// units, dsum = rowsum(dout * out)) and the conversion of its fp32 dQ sums to
// bf16 dq. Both are bandwidth-bound passes over a whole [tokens, heads, D]
// tensor, so each block takes one query tile (kBlockM rows of one head in the
// padded row space, traits' padded_row_start): the tile lies in one sequence,
// so one search a thread finds its tokens, where a search and 64-bit
// divisions per row or per pair kept an earlier version of both at half the
// memory bandwidth (ncu on the H200: ALU-bound, RESULTS.md).
#pragma once

#include <cuda_bf16.h>

#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_registers.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_traits.cuh"
#include "bumblebee/ops/cuda/flash_common.cuh"

// The kernels sit in an unnamed namespace, as the launch's: each translation
// unit that includes this keeps its own.
namespace bb::cuda::flash_sm90 {
namespace {

constexpr int kRowKernelThreads = 256;

// Where padded query tile `tile` (rows kBlockM * tile ...) lies: its
// sequence's first token plus the tile's offset in it (`first`), and how many
// of its rows are tokens (`rows`: 0 to kBlockM; the rest are padding).
struct QueryTile {
  int64_t first;
  int rows;
};
template <int kBlockM>
__device__ __forceinline__ QueryTile query_tile(const int* cu_seqlens, int num_seqs, int64_t tile) {
  const int64_t row = tile * kBlockM;
  int lo = 0, hi = num_seqs - 1;  // the last sequence whose padded rows start at or before `row`
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (padded_row_start<kBlockM>(cu_seqlens, mid) <= row) lo = mid;
    else hi = mid - 1;
  }
  const int64_t offset = row - padded_row_start<kBlockM>(cu_seqlens, lo);
  const int64_t left = cu_seqlens[lo + 1] - cu_seqlens[lo] - offset;
  return {cu_seqlens[lo] + offset, int(left < 0 ? 0 : left < kBlockM ? left : kBlockM)};
}

// Per padded query row and head, in [heads, rows_padded] so a step's rows of
// one head are one aligned bulk copy: dsum = rowsum(dout * out), and lse in
// log2 units with the -inf of rows that saw no key turned to +inf (exp2(s -
// lse) is then 0 for every key, where -inf would give NaN for masked scores).
// Padding rows get +inf and 0. One block a (head, query tile); a row's D
// values are read 8 at a time by D / 8 neighbouring lanes.
template <int kBlockM, int D>
__global__ void __launch_bounds__(kRowKernelThreads)
    row_stats_kernel(const __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ dout,
                     const float* __restrict__ lse, const int* __restrict__ cu_seqlens, int num_seqs,
                     int64_t tiles_per_head, int heads, float* __restrict__ lse_log2, float* __restrict__ dsum) {
  constexpr int kLanesPerRow = D / 8, kRowsPerPass = kRowKernelThreads / kLanesPerRow;
  static_assert(kLanesPerRow <= 32 && kBlockM % kRowsPerPass == 0);
  const int head = int(blockIdx.x / tiles_per_head);
  const int64_t tile = blockIdx.x % tiles_per_head;
  const QueryTile t = query_tile<kBlockM>(cu_seqlens, num_seqs, tile);
  const int part = int(threadIdx.x) % kLanesPerRow;
  float acc[kBlockM / kRowsPerPass];
#pragma unroll
  for (int pass = 0; pass < kBlockM / kRowsPerPass; ++pass) {  // loads of every pass in flight together
    const int r = pass * kRowsPerPass + int(threadIdx.x) / kLanesPerRow;
    acc[pass] = 0.f;
    if (r < t.rows) {
      const int64_t at = ((t.first + r) * heads + head) * D + part * 8;
      const uint4 o = *reinterpret_cast<const uint4*>(out + at), d = *reinterpret_cast<const uint4*>(dout + at);
      const auto* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
      const auto* d2 = reinterpret_cast<const __nv_bfloat162*>(&d);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 a = __bfloat1622float2(o2[i]), b = __bfloat1622float2(d2[i]);
        acc[pass] += a.x * b.x + a.y * b.y;
      }
    }
  }
#pragma unroll
  for (int pass = 0; pass < kBlockM / kRowsPerPass; ++pass) {
#pragma unroll
    for (int offset = kLanesPerRow / 2; offset > 0; offset >>= 1)
      acc[pass] += __shfl_xor_sync(0xffffffffu, acc[pass], offset);
    const int r = pass * kRowsPerPass + int(threadIdx.x) / kLanesPerRow;
    if (part != 0) continue;
    const int64_t index = head * tiles_per_head * kBlockM + tile * kBlockM + r;
    if (r < t.rows) {
      const float l = lse[(t.first + r) * heads + head];
      dsum[index] = acc[pass];
      lse_log2[index] = l == -INFINITY ? INFINITY : l * kLog2e;
    } else {
      dsum[index] = 0.f;
      lse_log2[index] = INFINITY;
    }
  }
}

// dq = dq_accum * scale in bf16. One block a (head, query tile, consumer):
// the consumer's tile (kBlockM x kDqCols fp32 in its registers' order:
// store_dq_tile, dq_tile_group) is read in that order, a float4 a thread at
// a time, into shared memory by (row, column), then written out a row's 8
// columns (16 bytes) a thread. Rows 8 floats longer than the tile's keep both steps free
// of bank conflicts. Blocks also zero, grid-strided, the dq of tokens past the
// last sequence, as the FlashAttention-2 path leaves them.
template <class T>
__global__ void __launch_bounds__(kRowKernelThreads)
    dq_convert_kernel(const float* __restrict__ dq_accum, const int* __restrict__ cu_seqlens, int num_seqs,
                      int64_t tokens, int heads, int64_t tiles_per_head, float scale, __nv_bfloat16* __restrict__ dq) {
  constexpr int D = T::kHeadDimQk, C = T::kDqCols, kRow = C + 8, kChunks = C / 8;
  static_assert(T::kBlockM == 64 && C % 8 == 0, "the register order of store_dq_tile is a 64-row tile's");
  __shared__ __align__(16) float rows[T::kBlockM * kRow];
  const int consumer = int(blockIdx.x % T::kConsumers);
  const int64_t head_tile = blockIdx.x / T::kConsumers;
  const int head = int(head_tile / tiles_per_head);
  const int64_t tile = head_tile % tiles_per_head;
  const QueryTile t = query_tile<T::kBlockM>(cu_seqlens, num_seqs, tile);
  if (t.rows > 0) {
    const auto* src = reinterpret_cast<const float4*>(dq_accum + head_tile * (T::kConsumers * T::kDqTileFloats) +
                                                      consumer * T::kDqTileFloats);
    for (int e = int(threadIdx.x); e < T::kDqTileFloats / 4; e += kRowKernelThreads) {
      const float4 v = src[e];
      const DqTileGroup g = dq_tile_group(e);
      *reinterpret_cast<float2*>(&rows[g.row * kRow + g.col]) = make_float2(v.x, v.y);
      *reinterpret_cast<float2*>(&rows[(g.row + 8) * kRow + g.col]) = make_float2(v.z, v.w);
    }
    __syncthreads();
    for (int q = int(threadIdx.x); q < t.rows * kChunks; q += kRowKernelThreads) {
      const int r = q / kChunks, c = 8 * (q % kChunks);
      const float4 a = *reinterpret_cast<const float4*>(&rows[r * kRow + c]);
      const float4 b = *reinterpret_cast<const float4*>(&rows[r * kRow + c + 4]);
      // __stwb: one 16-byte store (a plain uint4 assignment here compiles to four 4-byte ones).
      __stwb(reinterpret_cast<uint4*>(dq + ((t.first + r) * heads + head) * D + consumer * C + c),
             make_uint4(flash::pack_bf16(a.x * scale, a.y * scale), flash::pack_bf16(a.z * scale, a.w * scale),
                        flash::pack_bf16(b.x * scale, b.y * scale), flash::pack_bf16(b.z * scale, b.w * scale)));
    }
  }
  const int64_t tail = int64_t(cu_seqlens[num_seqs]) * heads * D, end = tokens * heads * D;
  for (int64_t i = tail + (int64_t(blockIdx.x) * kRowKernelThreads + threadIdx.x) * 8; i < end;
       i += int64_t(gridDim.x) * kRowKernelThreads * 8)
    *reinterpret_cast<uint4*>(dq + i) = make_uint4(0, 0, 0, 0);
}

}  // namespace
}  // namespace bb::cuda::flash_sm90
