// The consumers' loop of the sm_90a flash attention backward at (192, 128)
// (BackwardTraitsWide, flash_backward_sm90_wide_traits.cuh); the producer,
// warp 1's dQ reductions and the kernel around it are
// flash_backward_sm90_kernel.cuh's.
//
// Per step a consumer (48 of the block's 96 keys) runs, on wgmma:
//   S = Q K^T and dP = dO V^T                 (queries, its keys)
//   P = exp2(S scale_log2 - lse), dS = P (dP - dsum)  (registers)
//   P into shared memory (keys contiguous), then dV^T += dO^T P  (head dim,
//   its keys) runs while dS follows it there
//   dQ = dS K over both consumers' keys, its half of the head dim, into its
//   shared dQ tile for warp 1, and dK^T += Q^T dS
// A named barrier of the consumer's own threads puts its P in place before
// its dV^T; one of both consumers puts all of dS in place before either
// issues dQ. dS has a buffer per stage, as in the transposed loop; P one,
// which only its own consumer reads.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_registers.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_steps.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_traits.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_sm90_gemm.cuh"

namespace bb::cuda::flash_sm90 {

// A consumer warpgroup's 48 keys (mma_thread in [0, 256) over both
// consumers): every step, then dK and dV.
template <class T>
__device__ void consume_steps_wide(const typename T::Params& p, typename T::SharedStorage& ss, const KeyBlockSpan& b,
                                   typename T::Pipeline& pipeline, int mma_thread) {
  using BlockM = typename T::BlockM;
  using BlockN = typename T::BlockN;
  using HeadDimQk = typename T::HeadDimQk;
  using HeadDimV = typename T::HeadDimV;
  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmaKV mma_kv;
  typename T::TiledMmaQ mma_q;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_thread);
  auto thr_kv = mma_kv.get_thread_slice(mma_thread);
  auto thr_q = mma_q.get_thread_slice(mma_thread);

  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQt{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename T::SmemLayoutdO{});
  Tensor sdOt = make_tensor(make_smem_ptr(ss.dout.data()), typename T::SmemLayoutdOt{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutK{});
  Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutKt{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename T::SmemLayoutV{});
  Tensor sP = make_tensor(make_smem_ptr(ss.p_ds.data()), typename T::SmemLayoutP{});
  Tensor sPt = make_tensor(make_smem_ptr(ss.p_ds.data()), typename T::SmemLayoutPt{});
  Tensor sdS = make_tensor(make_smem_ptr(ss.p_ds.data() + T::kPElements), typename T::SmemLayoutdS{});
  Tensor sdSt = make_tensor(make_smem_ptr(ss.p_ds.data() + T::kPElements), typename T::SmemLayoutdSt{});

  // Operands (shared-memory descriptors; (MMA, MMA_M|N, MMA_K[, stages])).
  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ);
  Tensor tSrK = thr_sdp.partition_fragment_B(sK);
  Tensor tPrdO = thr_sdp.partition_fragment_A(sdO);
  Tensor tPrV = thr_sdp.partition_fragment_B(sV);
  Tensor tVrdOt = thr_kv.partition_fragment_A(sdOt);
  Tensor tVrP = thr_kv.partition_fragment_B(sPt);
  Tensor tKrQt = thr_kv.partition_fragment_A(sQt);
  Tensor tKrdS = thr_kv.partition_fragment_B(sdSt);
  Tensor tQrdS = thr_q.partition_fragment_A(sdS);
  Tensor tQrKt = thr_q.partition_fragment_B(sKt);
  // Accumulators and the coordinates of each of their registers.
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<BlockM, BlockN>{});
  Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<BlockM, BlockN>{});
  Tensor tVrdV = partition_fragment_C(mma_kv, Shape<HeadDimV, BlockN>{});
  Tensor tKrdK = partition_fragment_C(mma_kv, Shape<HeadDimQk, BlockN>{});
  Tensor tQrdQ = partition_fragment_C(mma_q, Shape<BlockM, HeadDimQk>{});
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BlockM, BlockN>{}));  // (query, key)
  Tensor tVc = thr_kv.partition_C(make_identity_tensor(Shape<HeadDimV, BlockN>{}));   // (column, key)
  Tensor tKc = thr_kv.partition_C(make_identity_tensor(Shape<HeadDimQk, BlockN>{}));  // (column, key)
  using Element = typename T::Element;
  Tensor rP = make_tensor<Element>(tSrS.layout());
  Tensor rdS = make_tensor<Element>(tSrS.layout());

  clear(tVrdV);
  clear(tKrdK);
  const int consumer = mma_thread / 128, wg_thread = mma_thread % 128;
  float* dq_tile = start_consumer<T>(ss, b, consumer, wg_thread);
  typename T::PipelineState state;
  for (int step = 0; step < b.steps; ++step) {
    const int m0 = step_m0<T>(b, step);
    pipeline.consumer_wait(state);
    const int stage = state.index();
    issue_gemm<true>(mma_sdp, tSrQ(_, _, _, stage), tSrK, tSrS);
    issue_gemm<true>(mma_sdp, tPrdO(_, _, _, stage), tPrV, tSrdP);
    warpgroup_wait<1>();
    warpgroup_fence_operand(tSrS);
    // Only tiles reaching past the keys' end or crossing the diagonal need the mask.
    const bool edge = b.n0 + T::kBlockN > b.len_kv || (p.causal && b.n0 + T::kBlockN - 1 > m0 + b.shift);
    if (edge) mask_scores(tSrS, tScS, m0, b.n0, b.len_kv, p.causal, b.shift);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrdP);
    probs_and_grads<0>(tSrS, tSrdP, tScS, p.scale_log2, ss.lse[stage], ss.dsum[stage]);
    pack_bf16(tSrS, rP);
    store_packed<0>(rP, tScS, sP);
    cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read by wgmma
    cutlass::arch::NamedBarrier::sync(128, kPBarrier + consumer);
    issue_gemm<false>(mma_kv, tVrdOt(_, _, _, stage), tVrP, tVrdV);
    pack_bf16(tSrdP, rdS);
    Tensor sdS_stage = sdS(_, _, stage);
    store_packed<0>(rdS, tScS, sdS_stage);
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(T::kMmaThreads, kDsBarrier);
    issue_gemm<true>(mma_q, tQrdS(_, _, _, stage), tQrKt, tQrdQ);
    issue_gemm<false>(mma_kv, tKrQt(_, _, _, stage), tKrdS(_, _, _, stage), tKrdK);
    warpgroup_wait<1>();  // dV^T and dQ done, dK^T still running
    warpgroup_fence_operand(tQrdQ);
    hand_off_dq(tQrdQ, dq_tile, consumer, wg_thread);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tVrdV);
    warpgroup_fence_operand(tKrdK);
    pipeline.consumer_release(state);
    ++state;
  }
  store_dk_dv<T>(p, b, [&](auto* dv, auto* dk) {
    store_key_cols<T::kHeadDimV>(dv, tVrdV, tVc, b.kv_start, b.n0, b.len_kv, p.heads_kv, b.kv_head, 1.f);
    store_key_cols<T::kHeadDimQk>(dk, tKrdK, tKc, b.kv_start, b.n0, b.len_kv, p.heads_kv, b.kv_head, p.scale);
  });
}

}  // namespace bb::cuda::flash_sm90
