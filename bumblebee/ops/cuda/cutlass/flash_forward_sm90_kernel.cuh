// The sm_90a flash attention forward kernel (FlashAttention-3 scheme): the
// producer, the consumers' main loop and epilogue, and the kernel that splits
// a block into the two roles. Its types are in flash_forward_sm90_traits.cuh;
// flash_forward_sm90.cu builds the TMA descriptors and launches it.
//
// One block of three warpgroups computes 128 query rows of one head of one
// sequence (four and 192 rows at head dim 64). Warpgroup 0 is the producer:
// one thread issues TMA loads of the Q tile and of the K and V tiles, which
// stream through two-stage mbarrier pipelines (CUTLASS's PipelineTmaAsync,
// one for K and one for V). The others are the consumers, 64 query rows
// each. setmaxnreg moves registers from the producer (24 a thread) to the
// consumers (240; 160 with three).
//
// Per key tile, a consumer runs S = Q K^T on wgmma with both operands in
// shared memory, the mask and the online softmax in registers, and
// O += P V with P from registers (bf16) and V in shared memory. The two
// GEMMs overlap the softmax: S of tile j is issued, then P V of tile j + 1,
// and the softmax of S runs while P V is still on the tensor cores; O is
// rescaled once P V has landed. Across the consumers, named barriers
// alternate who issues GEMMs (pingpong), so one's softmax overlaps the
// other's GEMMs. Key tiles are walked from the last to the first, so the
// tiles that need masking (the causal diagonal, the sequence end) come first
// and the rest run unmasked.
//
// Packed variable-length sequences share one TMA descriptor per tensor: a
// tile is addressed at the sequence's first row plus the tile offset, so a
// tile crossing the sequence end reads the next sequence's rows (keys masked,
// query rows never stored) and one crossing the tensor end reads TMA's zero
// fill. O and lse are stored from registers under a row bound check.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "bumblebee/ops/cuda/cutlass/flash_forward_sm90_softmax.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_sm90_gemm.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_forward_sm90_traits.cuh"

namespace bb::cuda::flash_sm90 {

// The producer: Q once, then K and V tiles from the last to the first, each
// K one tile ahead of its V (the consumer needs S of tile j before P V of
// tile j + 1). Run by one thread.
template <class T>
__device__ void load_tiles(const typename T::Params& p, typename T::SharedStorage& ss, const BlockSpan& b,
                           typename T::Pipeline& k_pipeline, typename T::Pipeline& v_pipeline) {
  using BlockM = typename T::BlockM;
  using BlockN = typename T::BlockN;
  using HeadQk = typename T::HeadQk;
  using HeadV = typename T::HeadV;
  Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.tokens_q, int(T::kHeadDimQk), p.heads_q));
  Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.tokens_kv, int(T::kHeadDimQk), p.heads_kv));
  Tensor mVt = p.tma_v.get_tma_tensor(make_shape(int(T::kHeadDimV), p.tokens_kv, p.heads_kv));
  Tensor gQ = local_tile(domain_offset(make_coord(b.q_start, _0{}), mQ(_, _, b.head)), Shape<BlockM, HeadQk>{},
                         make_coord(b.m_block, _0{}));
  Tensor gK = local_tile(domain_offset(make_coord(b.kv_start, _0{}), mK(_, _, b.kv_head)), Shape<BlockN, HeadQk>{},
                         make_coord(_, _0{}));  // (kBlockN, DQK, tiles)
  Tensor gVt = local_tile(domain_offset(make_coord(_0{}, b.kv_start), mVt(_, _, b.kv_head)), Shape<HeadV, BlockN>{},
                          make_coord(_0{}, _));  // (DV, kBlockN, tiles)
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename T::SmemLayoutVt{});
  auto [tQg, tQs] = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sVt), group_modes<0, 2>(gVt));

  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.q_full, T::kQBytes);
  copy(p.tma_q.with(ss.q_full, 0), tQg, tQs);

  auto k_state = cutlass::make_producer_start_state<typename T::Pipeline>();
  auto v_state = cutlass::make_producer_start_state<typename T::Pipeline>();
  const int last = b.n_tiles - 1;
  k_pipeline.producer_acquire(k_state);
  copy(p.tma_k.with(*k_pipeline.producer_get_barrier(k_state), 0), tKg(_, last), tKs(_, k_state.index()));
  ++k_state;
  for (int n = last; n > 0; --n) {
    k_pipeline.producer_acquire(k_state);
    copy(p.tma_k.with(*k_pipeline.producer_get_barrier(k_state), 0), tKg(_, n - 1), tKs(_, k_state.index()));
    ++k_state;
    v_pipeline.producer_acquire(v_state);
    copy(p.tma_v.with(*v_pipeline.producer_get_barrier(v_state), 0), tVg(_, n), tVs(_, v_state.index()));
    ++v_state;
  }
  v_pipeline.producer_acquire(v_state);
  copy(p.tma_v.with(*v_pipeline.producer_get_barrier(v_state), 0), tVg(_, 0), tVs(_, v_state.index()));
}

// Pingpong among the consumer warpgroups: each issues its GEMMs for a tile
// only after the one before it (in a ring) has issued its own, so one
// warpgroup's softmax runs while another's GEMMs hold the tensor cores.
// Named barrier `c` (of 256 threads: consumer c and the one before it) is
// consumer c's turn: c waits on it before issuing and the previous consumer
// arrives on it after issuing. Consumer 0 starts with its turn granted; the
// last consumer skips its very last arrive, which would grant consumer 0 a
// turn no one takes, so every barrier ends the block with no arrival pending.
template <int kConsumers>
struct WarpScheduler {
  int consumer;  // 0 .. kConsumers - 1
  static constexpr int kThreads = 256;
  __device__ void grant_first() const {
    if (consumer == 0) cutlass::arch::NamedBarrier::arrive(kThreads, 0);
  }
  __device__ void wait_turn() const { cutlass::arch::NamedBarrier::sync(kThreads, consumer); }
  __device__ void pass_turn(bool last) const {
    if (!(last && consumer == kConsumers - 1))
      cutlass::arch::NamedBarrier::arrive(kThreads, (consumer + 1) % kConsumers);
  }
};

// O (normalised by the row sums) and lse of this thread's rows that lie
// inside the sequence; a row that saw no key gets O = 0 and lse = -inf.
template <class T, class Acc, class Coords>
__device__ __forceinline__ void store_output(const typename T::Params& p, const BlockSpan& b, const Acc& o,
                                             const Coords& coords, RowStats& stats) {
  reduce_row_sums(stats);
  const int row0 = b.m_block * T::kBlockM;
  const int64_t o_stride = int64_t(p.heads_q) * T::kHeadDimV;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = stats.sum[r];
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = row0 + int(get<0>(coords(2 * r)));
    if (row >= b.len_q) continue;
    const int64_t token = int64_t(b.q_start) + row;
    auto* out = reinterpret_cast<__nv_bfloat162*>(p.out + token * o_stride + int64_t(b.head) * T::kHeadDimV);
#pragma unroll
    for (int i = 2 * r; i < size(o); i += 4)
      out[get<1>(coords(i)) / 2] = __floats2bfloat162_rn(o(i) * inv, o(i + 1) * inv);
    if ((threadIdx.x & 3) == 0)
      p.lse[token * p.heads_q + b.head] = sum > 0.f ? stats.max[r] * kLn2 + logf(sum) : -INFINITY;
  }
}

// A consumer warpgroup's 64 rows (mma_thread in [0, kMmaThreads) over all
// consumers): the key tiles from the last to the first, then the epilogue.
// All consumers walk the same tiles, which keeps the pingpong balanced.
template <class T>
__device__ void consume_tiles(const typename T::Params& p, typename T::SharedStorage& ss, const BlockSpan& b,
                              typename T::Pipeline& k_pipeline, typename T::Pipeline& v_pipeline, int mma_thread) {
  using BlockM = typename T::BlockM;
  using BlockN = typename T::BlockN;
  using HeadV = typename T::HeadV;
  typename T::TiledMmaQK mma_qk;
  typename T::TiledMmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(mma_thread);
  auto thr_pv = mma_pv.get_thread_slice(mma_thread);

  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename T::SmemLayoutVt{});
  Tensor tSrQ = thr_qk.partition_fragment_A(sQ);   // shared-memory descriptors
  Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stages)
  Tensor tOrV = thr_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<BlockM, BlockN>{});
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<BlockM, HeadV>{});
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<BlockM, BlockN>{}));  // (row, key) per register
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<BlockM, HeadV>{}));   // (row, column)
  // P in bf16 as the A operand of P V: ((2, 2, 2), 1, kBlockN / 16), the
  // score registers with pairs of 8-column blocks forming a k16 step.
  Tensor rP = make_tensor<typename T::Element>(tSrS.layout());
  Tensor tOrP =
      make_tensor(rP.data(), make_layout(make_shape(make_shape(_2{}, _2{}, _2{}), _1{}, Int<T::kBlockN / 16>{})));
  static_assert(size(tOrP) == size(tSrS));
  const WarpScheduler<T::kConsumers> scheduler{mma_thread / 128};

  RowStats stats;
  clear(tOrO);
  if (b.n_tiles == 0) {  // every row of the block precedes the first key
    store_output<T>(p, b, tOrO, tOcO, stats);
    return;
  }
  const int row0 = b.m_block * T::kBlockM;
  // Tiles that reach past the sequence end or the first row's diagonal need the mask.
  auto needs_mask = [&](int n) {
    const int key_end = (n + 1) * T::kBlockN;
    return key_end > b.len_kv || (p.causal && key_end - 1 > row0 + b.shift);
  };
  typename T::PipelineState k_state, v_state;
  float correction[2];

  cutlass::arch::ClusterTransactionBarrier::wait(&ss.q_full, 0);
  const int last = b.n_tiles - 1;
  scheduler.grant_first();
  k_pipeline.consumer_wait(k_state);
  scheduler.wait_turn();
  issue_gemm<true>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
  scheduler.pass_turn(last == 0);
  warpgroup_wait<0>();
  warpgroup_fence_operand(tSrS);
  k_pipeline.consumer_release(k_state);
  ++k_state;
  mask_scores(tSrS, tScS, row0, last * T::kBlockN, b.len_kv, p.causal, b.shift);
  softmax_step(tSrS, p.scale_log2, stats, correction);
  pack_probs(tSrS, rP);

  for (int n = last - 1; n >= 0; --n) {
    k_pipeline.consumer_wait(k_state);
    scheduler.wait_turn();
    issue_gemm<true>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
    v_pipeline.consumer_wait(v_state);
    issue_gemm<false>(mma_pv, tOrP, tOrV(_, _, _, v_state.index()), tOrO);
    scheduler.pass_turn(n == 0);
    warpgroup_wait<1>();  // S of tile n has landed; P V of tile n + 1 may still run
    warpgroup_fence_operand(tSrS);
    k_pipeline.consumer_release(k_state);
    ++k_state;
    if (needs_mask(n)) mask_scores(tSrS, tScS, row0, n * T::kBlockN, b.len_kv, p.causal, b.shift);
    softmax_step(tSrS, p.scale_log2, stats, correction);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    v_pipeline.consumer_release(v_state);
    ++v_state;
    rescale_rows(tOrO, correction);
    pack_probs(tSrS, rP);
  }
  v_pipeline.consumer_wait(v_state);
  issue_gemm<false>(mma_pv, tOrP, tOrV(_, _, _, v_state.index()), tOrO);
  warpgroup_wait<0>();
  warpgroup_fence_operand(tOrO);
  v_pipeline.consumer_release(v_state);
  store_output<T>(p, b, tOrO, tOcO, stats);
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) flash_forward_sm90_kernel(const __grid_constant__ typename T::Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);
  const BlockSpan b = block_span<T>(p);
  if (b.m_block * T::kBlockM >= b.len_q) return;  // past this sequence's queries (whole block)

  // The warpgroup index made warp-uniform for the compiler.
  const int warp_group = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (threadIdx.x == 0) cutlass::arch::ClusterTransactionBarrier::init(&ss.q_full, 1);
  auto pipe = pipeline_roles<typename T::Pipeline>(warp_group, T::kMmaThreads);
  pipe.transaction_bytes = T::kKBytes;
  typename T::Pipeline k_pipeline(ss.k_pipeline, pipe, Shape<_1, _1, _1>{});
  pipe.transaction_bytes = T::kVBytes;
  typename T::Pipeline v_pipeline(ss.v_pipeline, pipe, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0 && b.n_tiles > 0) load_tiles<T>(p, ss, b, k_pipeline, v_pipeline);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
  consume_tiles<T>(p, ss, b, k_pipeline, v_pipeline, int(threadIdx.x) - 128);
}

}  // namespace bb::cuda::flash_sm90
