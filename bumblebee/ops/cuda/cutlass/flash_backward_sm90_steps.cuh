// What both consumer loops of the sm_90a flash attention backward share
// (flash_backward_sm90_kernel.cuh's transposed one, flash_backward_sm90_wide.cuh's):
// a step's query head and rows, the block's named barriers, a consumer's
// start, the handoff of its dQ tile to warp 1, and the end stores of dK and dV.
#pragma once

#include <cutlass/arch/barrier.h>

#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_registers.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_traits.cuh"

namespace bb::cuda::flash_sm90 {

// The step's query head and first query row.
__device__ __forceinline__ int step_head(const KeyBlockSpan& b, int step) {
  return b.first_head + step / b.m_count;
}
template <class T>
__device__ __forceinline__ int step_m0(const KeyBlockSpan& b, int step) {
  return (b.m_first + step % b.m_count) * T::kBlockM;
}

// Named barriers of the block: both consumers' dS halves in place; per
// consumer, its dQ tile free (warp 1 has read it) and full, and (at
// (192, 128)) its P in place.
constexpr uint32_t kDsBarrier = 0, kDqEmptyBarrier = 1, kDqFullBarrier = 3, kPBarrier = 5;
constexpr uint32_t kDqHandoffThreads = 128 + 32;  // a consumer and warp 1

// The first row of a step's query tile in the padded row space of head `head`.
template <class T>
__device__ __forceinline__ int64_t step_padded_row(const typename T::Params& p, const KeyBlockSpan& b, int head,
                                                   int m0) {
  return int64_t(head) * p.rows_padded + b.q_padded + m0;
}

// A consumer's start: its dQ tile starts free (its first warp stands in for
// warp 1's first arrival), and its steps wait for K and V. Returns the tile.
template <class T>
__device__ __forceinline__ float* start_consumer(typename T::SharedStorage& ss, const KeyBlockSpan& b, int consumer,
                                                 int wg_thread) {
  if (wg_thread < 32) cutlass::arch::NamedBarrier::arrive(kDqHandoffThreads, kDqEmptyBarrier + consumer);
  if (b.steps > 0) cutlass::arch::ClusterTransactionBarrier::wait(&ss.kv_full, 0);
  return ss.dq.data() + consumer * T::kDqTileFloats;
}

// The consumer's finished dQ accumulator to warp 1: once warp 1 has read the
// tile of the step before, this one goes into it in register order and is
// marked full.
template <class Acc>
__device__ __forceinline__ void hand_off_dq(const Acc& dq, float* tile, int consumer, int wg_thread) {
  cutlass::arch::NamedBarrier::sync(kDqHandoffThreads, kDqEmptyBarrier + consumer);
  store_dq_tile(dq, tile, wg_thread);
  cutlass::arch::fence_view_async_shared();  // read by warp 1's bulk reduction
  cutlass::arch::NamedBarrier::arrive(kDqHandoffThreads, kDqFullBarrier + consumer);
}

// The block's dK and dV: store(dv, dk) with where they go, bf16 dv and dk
// or, when a group's walk is split, this part's fp32 slices.
template <class T, class Store>
__device__ __forceinline__ void store_dk_dv(const typename T::Params& p, const KeyBlockSpan& b, Store store) {
  if (p.group_parts == 1) {
    store(p.dv, p.dk);
  } else {
    const int64_t rows = int64_t(b.part) * p.tokens_kv * p.heads_kv;
    store(p.dv_parts + rows * T::kHeadDimV, p.dk_parts + rows * T::kHeadDimQk);
  }
}

}  // namespace bb::cuda::flash_sm90
