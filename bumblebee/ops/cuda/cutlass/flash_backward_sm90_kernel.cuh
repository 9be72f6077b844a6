// The sm_90a flash attention backward kernel (FlashAttention-3 scheme): the
// producer, the consumers' loop over query tiles with transposed scores, and
// the kernel that splits a block into the two roles (with
// flash_backward_sm90_wide.cuh's loop at (192, 128)). Its types are in
// flash_backward_sm90_traits.cuh, its register-side pieces in
// flash_backward_sm90_registers.cuh; flash_backward_sm90_launch.cuh builds the
// TMA descriptors and launches it. What follows describes the transposed loop.
//
// One block of three warpgroups owns 128 keys of one kv head of one sequence
// and walks every query head of the kv head's group and every 64-row query
// tile that sees its keys, so a group's dK and dV are summed in registers
// with no second pass. Warpgroup 0 is the producer: one thread of warp 0
// loads the K and V tiles once by TMA, then streams each step's Q and dO
// tiles and lse and dsum rows through a two-stage mbarrier pipeline
// (CUTLASS's PipelineTmaAsync); warp 1 adds each consumer's dQ tile into
// dq_accum with one bulk reduction from shared memory. Warpgroups 1 and 2
// are the consumers, 64 keys each; setmaxnreg moves registers from the
// producer (24 a thread) to them (240).
//
// Per step a consumer runs, on wgmma:
//   S^T = K Q^T and dP^T = V dO^T          (shared-memory operands)
//   P^T = exp2(S^T scale_log2 - lse_log2), dS^T = P^T (dP^T - dsum)  (registers)
//   dV += P^T dO and dK += dS^T Q          (P^T, dS^T from registers; dO^T,
//                                           Q^T as transposed views)
//   dQ = dS K, head dim split over the two consumers (dS through shared
//   memory, since it spans both consumers' keys), then into the consumer's
//   shared dQ tile for warp 1, while dK runs.
// One named-barrier sync of both consumers per step puts both halves of dS in
// place before either issues dQ; dS has a buffer per stage, so the next
// step's writes need no second sync (the other consumer's dQ read the other
// buffer, and finished before it reached this step's sync). A pair of named
// barriers per consumer hands its dQ tile to warp 1 and back.
//
// Packed sequences share one TMA descriptor per tensor, as in the forward:
// a tile crossing its sequence's end reads the next sequence's rows (keys
// masked; query rows read lse +inf from the padded statistics, so P = dS = 0,
// and their dQ lands in padding rows) or TMA's zero fill past the tensor.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_registers.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_steps.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_traits.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_wide.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_sm90_gemm.cuh"

namespace bb::cuda::flash_sm90 {

// The producer: K and V once, then Q, dO, lse and dsum of every step. Run by
// one thread.
template <class T>
__device__ void load_tiles_bwd(const typename T::Params& p, typename T::SharedStorage& ss, const KeyBlockSpan& b,
                               typename T::Pipeline& pipeline) {
  using BlockM = typename T::BlockM;
  using BlockN = typename T::BlockN;
  using HeadDimQk = Int<T::kHeadDimQk>;
  using HeadDimV = Int<T::kHeadDimV>;
  Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.tokens_q, int(T::kHeadDimQk), p.heads_q));
  Tensor mdO = p.tma_do.get_tma_tensor(make_shape(p.tokens_q, int(T::kHeadDimV), p.heads_q));
  Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.tokens_kv, int(T::kHeadDimQk), p.heads_kv));
  Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.tokens_kv, int(T::kHeadDimV), p.heads_kv));
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename T::SmemLayoutdO{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename T::SmemLayoutV{});

  Tensor gK = local_tile(domain_offset(make_coord(b.kv_start, _0{}), mK(_, _, b.kv_head)), Shape<BlockN, HeadDimQk>{},
                         make_coord(b.n0 / T::kBlockN, _0{}));
  Tensor gV = local_tile(domain_offset(make_coord(b.kv_start, _0{}), mV(_, _, b.kv_head)), Shape<BlockN, HeadDimV>{},
                         make_coord(b.n0 / T::kBlockN, _0{}));
  auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.kv_full, T::kKBytes + T::kVBytes);
  copy(p.tma_k.with(ss.kv_full, 0), tKg, tKs);
  copy(p.tma_v.with(ss.kv_full, 0), tVg, tVs);

  auto state = cutlass::make_producer_start_state<typename T::Pipeline>();
  for (int step = 0; step < b.steps; ++step) {
    const int head = step_head(b, step);
    const auto tile = make_coord(step_m0<T>(b, step) / T::kBlockM, _0{});
    Tensor gQ =
        local_tile(domain_offset(make_coord(b.q_start, _0{}), mQ(_, _, head)), Shape<BlockM, HeadDimQk>{}, tile);
    Tensor gdO =
        local_tile(domain_offset(make_coord(b.q_start, _0{}), mdO(_, _, head)), Shape<BlockM, HeadDimV>{}, tile);
    auto [tQg, tQs] = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    auto [tdOg, tdOs] =
        tma_partition(p.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
    pipeline.producer_acquire(state);
    auto* barrier = pipeline.producer_get_barrier(state);
    copy(p.tma_q.with(*barrier, 0), tQg, tQs(_, state.index()));
    copy(p.tma_do.with(*barrier, 0), tdOg, tdOs(_, state.index()));
    const int64_t row = step_padded_row<T>(p, b, head, step_m0<T>(b, step));
    SM90_BULK_COPY_G2S::copy(p.lse_log2 + row, barrier, ss.lse[state.index()], T::kStatBytes);
    SM90_BULK_COPY_G2S::copy(p.dsum + row, barrier, ss.dsum[state.index()], T::kStatBytes);
    ++state;
  }
}

// dQ tile of shared memory into dq_accum by an asynchronous bulk reduction.
__device__ __forceinline__ void bulk_reduce_add(float* gmem, const float* smem, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               :
               : "l"(gmem), "r"(cute::cast_smem_ptr_to_uint(smem)), "r"(bytes)
               : "memory");
}

// Warp 1 of the producer: each step, each consumer's dQ tile into
// dq_accum, which holds the tiles in the same register order. Both
// consumers' reductions are in flight together (a bulk group each), and a
// tile is handed back as soon as its own group has been read: one after the
// other, the second consumer's tile came back only after both reads (a
// stall at (192, 128): +1.3 % at 128 heads, unchanged at hd 64 and 128).
template <class T>
__device__ void store_dq_tiles(const typename T::Params& p, typename T::SharedStorage& ss, const KeyBlockSpan& b) {
  const bool leader = threadIdx.x % 32 == 0;
  for (int step = 0; step < b.steps; ++step) {
    const int64_t tile = step_padded_row<T>(p, b, step_head(b, step), step_m0<T>(b, step)) / T::kBlockM;
#pragma unroll
    for (int consumer = 0; consumer < T::kConsumers; ++consumer) {
      cutlass::arch::NamedBarrier::sync(kDqHandoffThreads, kDqFullBarrier + consumer);
      if (leader) {
        bulk_reduce_add(p.dq_accum + (tile * T::kConsumers + consumer) * T::kDqTileFloats,
                        ss.dq.data() + consumer * T::kDqTileFloats, T::kDqTileFloats * sizeof(float));
        tma_store_arrive();
      }
    }
    cute::for_each(cute::make_int_sequence<T::kConsumers>{}, [&](auto consumer) {
      if (leader) tma_store_wait<T::kConsumers - 1 - decltype(consumer)::value>();  // this tile has been read
      __syncwarp();
      cutlass::arch::NamedBarrier::arrive(kDqHandoffThreads, kDqEmptyBarrier + int(consumer));
    });
  }
}

// A consumer warpgroup's 64 keys (mma_thread in [0, 256) over both
// consumers): every step, then dK and dV.
template <class T>
__device__ void consume_steps(const typename T::Params& p, typename T::SharedStorage& ss, const KeyBlockSpan& b,
                              typename T::Pipeline& pipeline, int mma_thread) {
  using BlockM = typename T::BlockM;
  using BlockN = typename T::BlockN;
  using HeadDim = typename T::HeadDim;
  constexpr int D = T::kHeadDimQk;
  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmaKV mma_kv;
  typename T::TiledMmaQ mma_q;
  auto thr_sdp = mma_sdp.get_thread_slice(mma_thread);
  auto thr_kv = mma_kv.get_thread_slice(mma_thread);
  auto thr_q = mma_q.get_thread_slice(mma_thread);

  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename T::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(ss.dout.data()), typename T::SmemLayoutQt{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutK{});
  Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutKt{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename T::SmemLayoutV{});
  Tensor sdS = make_tensor(make_smem_ptr(ss.p_ds.data()), typename T::SmemLayoutdS{});

  // Operands (shared-memory descriptors; (MMA, MMA_M|N, MMA_K[, stages])).
  Tensor tSrK = thr_sdp.partition_fragment_A(sK);
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);
  Tensor tPrV = thr_sdp.partition_fragment_A(sV);
  Tensor tPrdO = thr_sdp.partition_fragment_B(sdO);
  Tensor tVrdO = thr_kv.partition_fragment_B(sdOt);
  Tensor tKrQ = thr_kv.partition_fragment_B(sQt);
  Tensor tQrdS = thr_q.partition_fragment_A(sdS);
  Tensor tQrK = thr_q.partition_fragment_B(sKt);
  // Accumulators and the (row, column) of each of their registers.
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<BlockN, BlockM>{});
  Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<BlockN, BlockM>{});
  Tensor tVrdV = partition_fragment_C(mma_kv, Shape<BlockN, HeadDim>{});
  Tensor tKrdK = partition_fragment_C(mma_kv, Shape<BlockN, HeadDim>{});
  Tensor tQrdQ = partition_fragment_C(mma_q, Shape<BlockM, HeadDim>{});
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<BlockN, BlockM>{}));    // (key, query)
  Tensor tKVc = thr_kv.partition_C(make_identity_tensor(Shape<BlockN, HeadDim>{}));    // (key, column)
  // P^T and dS^T in bf16 as the A operand of dV and dK: ((2, 2, 2), 1,
  // kBlockM / 16), the accumulator registers with pairs of 8-query blocks
  // forming a k16 step (as the forward's P).
  using Element = typename T::Element;
  Tensor rP = make_tensor<Element>(tSrS.layout());
  Tensor rdS = make_tensor<Element>(tSrS.layout());
  const auto a_layout = make_layout(make_shape(make_shape(_2{}, _2{}, _2{}), _1{}, Int<T::kBlockM / 16>{}));
  Tensor tVrP = make_tensor(rP.data(), a_layout);
  Tensor tKrdS = make_tensor(rdS.data(), a_layout);
  static_assert(size(tVrP) == size(tSrS));

  clear(tVrdV);
  clear(tKrdK);
  const int consumer = mma_thread / 128, wg_thread = mma_thread % 128;
  float* dq_tile = start_consumer<T>(ss, b, consumer, wg_thread);
  typename T::PipelineState state;
  for (int step = 0; step < b.steps; ++step) {
    const int m0 = step_m0<T>(b, step);
    pipeline.consumer_wait(state);
    const int stage = state.index();
    issue_gemm<true>(mma_sdp, tSrK, tSrQ(_, _, _, stage), tSrS);
    issue_gemm<true>(mma_sdp, tPrV, tPrdO(_, _, _, stage), tSrdP);
    warpgroup_wait<1>();
    warpgroup_fence_operand(tSrS);
    // Only tiles reaching past the keys' end or crossing the diagonal need the mask.
    const bool edge = b.n0 + T::kBlockN > b.len_kv || (p.causal && b.n0 + T::kBlockN - 1 > m0 + b.shift);
    if (edge) mask_scores_t(tSrS, tScS, b.n0, m0, b.len_kv, p.causal, b.shift);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrdP);
    probs_and_grads<1>(tSrS, tSrdP, tScS, p.scale_log2, ss.lse[stage], ss.dsum[stage]);
    pack_bf16(tSrS, rP);
    pack_bf16(tSrdP, rdS);

    Tensor sdS_stage = sdS(_, _, stage);
    Tensor tQrdS_stage = tQrdS(_, _, _, stage);
    store_packed<1>(rdS, tScS, sdS_stage);
    issue_gemm<false>(mma_kv, tVrP, tVrdO(_, _, _, stage), tVrdV);
    cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read by wgmma
    cutlass::arch::NamedBarrier::sync(T::kMmaThreads, kDsBarrier);
    issue_gemm<true>(mma_q, tQrdS_stage, tQrK, tQrdQ);
    issue_gemm<false>(mma_kv, tKrdS, tKrQ(_, _, _, stage), tKrdK);
    warpgroup_wait<1>();  // dV and dQ done, dK still running
    warpgroup_fence_operand(tQrdQ);
    hand_off_dq(tQrdQ, dq_tile, consumer, wg_thread);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tVrdV);
    warpgroup_fence_operand(tKrdK);
    pipeline.consumer_release(state);
    ++state;
  }
  store_dk_dv<T>(p, b, [&](auto* dv, auto* dk) {
    store_key_rows<D>(dv, tVrdV, tKVc, b.kv_start, b.n0, b.len_kv, p.heads_kv, b.kv_head, 1.f);
    store_key_rows<D>(dk, tKrdK, tKVc, b.kv_start, b.n0, b.len_kv, p.heads_kv, b.kv_head, p.scale);
  });
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_backward_sm90_kernel(const __grid_constant__ typename T::Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);
  const KeyBlockSpan b = key_block_span<T>(p);
  if (b.n0 >= b.len_kv) return;  // past this sequence's keys (whole block)

  const int warp_group = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (threadIdx.x == 0) cutlass::arch::ClusterTransactionBarrier::init(&ss.kv_full, 1);
  auto pipe = pipeline_roles<typename T::Pipeline>(warp_group, T::kMmaThreads);
  pipe.transaction_bytes = T::kQBytes + T::kdOBytes + 2 * T::kStatBytes;  // Q, dO, lse and dsum
  typename T::Pipeline pipeline(ss.q_pipeline, pipe, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    const int warp = int(threadIdx.x) / 32;
    if (warp == 0 && threadIdx.x == 0 && b.steps > 0) load_tiles_bwd<T>(p, ss, b, pipeline);
    if (warp == 1) store_dq_tiles<T>(p, ss, b);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
  const int mma_thread = int(threadIdx.x) - 128;
  if constexpr (T::kScoresTransposed) consume_steps<T>(p, ss, b, pipeline, mma_thread);
  else consume_steps_wide<T>(p, ss, b, pipeline, mma_thread);
}

}  // namespace bb::cuda::flash_sm90
