// Compile-time traits of the sm_90a flash attention backward
// (flash_backward_sm90_kernel.cuh). A configuration is its tiles (tile
// shapes, warpgroup roles and register budgets, the GEMMs' wgmma types and
// the shared-memory layouts with the transposed views the GEMMs read) inside
// BackwardConfig, which adds what every configuration shares: the byte
// counts of its loads, the TMA types over its layouts, the kernel
// parameters, the pipeline and the block's shared memory. Here: the tiles of
// the configuration whose consumers hold the transposed scores
// (BackwardTiles, for (64, 64) and (128, 128)), the padded query-row space of
// the row statistics and the dQ sums, and the key / query span of one block
// (flash_backward_sm90_steps.cuh has its steps).
// flash_backward_sm90_wide_traits.cuh holds the tiles of MLA's (192, 128).
#pragma once

#include "bumblebee/ops/cuda/cutlass/flash_sm90_cute.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_sm90_schedule.h"

#include <cutlass/gemm/collective/builders/sm90_common.inl>

namespace bb::cuda::flash_sm90 {

// D is the head dim of q, k, v and dout alike, (64, 64) or (128, 128). Each
// consumer owns 64 keys and holds S^T, dP^T, dK and dV of them in registers;
// at (192, 128) those leave no registers for dQ (WideBackwardTiles instead).
template <int D>
struct BackwardTiles {
  static constexpr int kHeadDimQk = D, kHeadDimV = D;
  static constexpr int kBlockN = 128;  // key rows per block, 64 per consumer warpgroup
  static constexpr int kBlockM = 64;   // query rows per step
  static constexpr int kStages = 2;
  static constexpr int kConsumers = 2;
  static constexpr int kMmaThreads = 128 * kConsumers;
  static constexpr int kThreads = kMmaThreads + 128;
  static constexpr int kDqCols = D / kConsumers;  // dQ columns per consumer
  // One consumer's dQ tile, fp32, in the order of its accumulator registers
  // (store_dq_tile): what it adds to dq_accum each step.
  static constexpr int kDqTileFloats = kBlockM * kDqCols;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // as the forward: 64,512 registers

  using Element = cutlass::bfloat16_t;
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using HeadDim = Int<D>;

  // S^T = K Q^T and dP^T = V dO^T, (keys, queries): each consumer takes 64 keys.
  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockN, BlockM, HeadDim>>(), Layout<Shape<_2, _1, _1>>{}));
  // dV += P^T dO and dK += dS^T Q, (keys, head dim): P^T and dS^T straight
  // from the S^T / dP^T accumulators' registers, the same 64 keys a consumer.
  using TiledMmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<BlockN, HeadDim, BlockM>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      Layout<Shape<_2, _1, _1>>{}));
  // dQ = dS K, (queries, head dim): dS from shared memory (both consumers'
  // keys), each consumer takes half of the head dim.
  using TiledMmaQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockM, Int<D / 2>, BlockN>, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      Layout<Shape<_1, _2, _1>>{}));

  // Q and dO: K-major (head dim contiguous) for S^T and dP^T, read
  // transposed (Q^T, dO^T: MN-major) by dK and dV. K: the same for S^T, and
  // read as K^T by dQ, whose consumers split its head dim in two, so the
  // swizzle atom may be no wider than half the head dim. V: only K-major.
  using SmemAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockM,
                                                                                 HeadDim>());
  using SmemAtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockN,
                                                                                 Int<D / 2>>());
  using SmemAtomV = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockN,
                                                                                 HeadDim>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQ{}, Shape<BlockM, HeadDim, Int<kStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK{}, Shape<BlockN, HeadDim>{}));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtomV{}, Shape<BlockN, HeadDim>{}));
  // The transposes as views of the same bytes: (head dim, rows[, stages]).
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_layout(Shape<HeadDim, BlockM, Int<kStages>>{}, Stride<BlockM, _1, Int<kBlockM * D>>{})));
  using SmemLayoutKt =
      decltype(composition(SmemLayoutK{}, make_layout(Shape<HeadDim, BlockN>{}, Stride<BlockN, _1>{})));
  // dS, the A operand of dQ = dS K, (queries, keys) MN-major: query pairs of
  // the dS^T accumulator are adjacent, so it is written 32 bits at a time.
  // One buffer per pipeline stage, so a step's writes cannot race the other
  // consumer's dQ product of the step before.
  using SmemAtomdS = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::MN, Element, BlockM,
                                                                                  BlockN>());
  using SmemLayoutdS = decltype(tile_to_shape(SmemAtomdS{}, Shape<BlockM, BlockN, Int<kStages>>{}));

  using SmemLayoutdO = SmemLayoutQ;
  static constexpr bool kScoresTransposed = true;  // consume_steps (flash_backward_sm90_kernel.cuh)
  static constexpr int kPElements = 0;             // P stays in registers
};

// Configuration Tiles' loads, parameters and shared memory.
template <class Tiles>
struct BackwardConfig : Tiles {
  using Element = typename Tiles::Element;
  static constexpr int kBlockM = Tiles::kBlockM, kBlockN = Tiles::kBlockN, kStages = Tiles::kStages;
  static constexpr int DQK = Tiles::kHeadDimQk, DV = Tiles::kHeadDimV;

  static constexpr uint32_t kQBytes = kBlockM * DQK * sizeof(Element);  // one Q stage
  static constexpr uint32_t kdOBytes = kBlockM * DV * sizeof(Element);  // one dO stage
  static constexpr uint32_t kKBytes = kBlockN * DQK * sizeof(Element);
  static constexpr uint32_t kVBytes = kBlockN * DV * sizeof(Element);
  static constexpr uint32_t kStatBytes = kBlockM * sizeof(float);  // one stage's lse or dsum

  // The packed tensors as TMA sees them, (tokens, head dim, heads), and the
  // TMA types over one stage of Q and dO and the K and V tiles.
  using GmemShape = Shape<int32_t, int32_t, int32_t>;
  using GmemStride = Stride<int64_t, _1, int64_t>;
  using GmemPtr = decltype(make_gmem_ptr(static_cast<const Element*>(nullptr)));
  using GmemTensor = decltype(make_tensor(GmemPtr{}, GmemShape{}, GmemStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(typename Tiles::SmemLayoutQ{}),
                                      Shape<Int<kBlockM>, Int<DQK>>{}, _1{}));
  using TmadO = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(typename Tiles::SmemLayoutdO{}),
                                       Shape<Int<kBlockM>, Int<DV>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, typename Tiles::SmemLayoutK{},
                                      Shape<Int<kBlockN>, Int<DQK>>{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, typename Tiles::SmemLayoutV{},
                                      Shape<Int<kBlockN>, Int<DV>>{}, _1{}));

  struct Params {
    TmaQ tma_q;
    TmadO tma_do;
    TmaK tma_k;
    TmaV tma_v;
    int tokens_q, tokens_kv, heads_q, heads_kv;
    const int* cu_seqlens_q;   // [S + 1]
    const int* cu_seqlens_kv;  // [S + 1]
    BlockOrder order;          // units (part, kv head, sequence) x key blocks
    int group_parts;           // blocks a key block's group walk is split over (group_parts_for)
    bool causal;               // diagonal bottom-right, as the forward
    float scale;               // softmax scale (dK's factor; dQ's is applied at its conversion)
    float scale_log2;          // softmax scale * log2(e)
    int rows_padded;           // query rows in the padded space (padded_rows)
    const float* lse_log2;     // [heads_q, rows_padded]: lse * log2(e); +inf for padding and rows that saw no key
    const float* dsum;         // [heads_q, rows_padded]: rowsum(dout * out); 0 for padding
    float* dq_accum;           // [heads_q, rows_padded / kBlockM, kConsumers, kDqTileFloats], unscaled
    Element* dk;               // [tokens_kv, heads_kv, DQK], when group_parts is 1
    Element* dv;               // [tokens_kv, heads_kv, DV], when group_parts is 1
    float* dk_parts;           // [group_parts, tokens_kv, heads_kv, DQK] scaled, when group_parts > 1
    float* dv_parts;           // [group_parts, tokens_kv, heads_kv, DV], when group_parts > 1
  };

  // One pipeline carries a step's Q and dO tiles and its lse and dsum rows
  // (all on one barrier).
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename cutlass::PipelineState<kStages>;

  // Every buffer on the 1024-byte grid of the 128-byte swizzle. P (where the
  // tiles keep it in shared memory: kPElements) and dS share one array, P
  // first (p_ds + kPElements is dS).
  struct SharedStorage {
    array_aligned<Element, cosize_v<typename Tiles::SmemLayoutK>, 1024> k;
    array_aligned<Element, cosize_v<typename Tiles::SmemLayoutV>, 1024> v;
    array_aligned<Element, cosize_v<typename Tiles::SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<typename Tiles::SmemLayoutdO>, 1024> dout;
    array_aligned<Element, Tiles::kPElements + cosize_v<typename Tiles::SmemLayoutdS>, 1024> p_ds;
    array_aligned<float, Tiles::kConsumers * Tiles::kDqTileFloats, 128> dq;  // each consumer's dQ tile
    alignas(128) float lse[kStages][kBlockM];
    alignas(128) float dsum[kStages][kBlockM];
    uint64_t kv_full;  // mbarrier: the K and V tiles have landed
    typename Pipeline::SharedStorage q_pipeline;
  };
  static_assert(Tiles::kPElements * sizeof(Element) % 1024 == 0, "dS must start on the swizzle's grid");
  static_assert(sizeof(SharedStorage) <= 227 * 1024, "the backward's tiles exceed a block's shared memory");
};

template <int D>
using BackwardTraits = BackwardConfig<BackwardTiles<D>>;

// How many blocks share the walk over a kv head's group of `group` query heads
// for one key block: a block walks at most kMaxGroupWalk heads. At 8:1 (32 / 4
// heads, 2 x 4096 tokens) key block 0 alone walked 8 heads x 64 query tiles,
// as many steps as the mean multiprocessor's whole share, so it ended the call
// (425 TFLOP/s against 459 at 4:1, benchmarks/RESULTS.md). The parts' dK and
// dV sum in fp32 in a second kernel.
constexpr int kMaxGroupWalk = 4;
inline int group_parts_for(int group) {
  int parts = 1;
  while (group / parts > kMaxGroupWalk || group % parts != 0) ++parts;
  return parts;
}

// The padded query-row space: sequence s's rows start at padded_row_start(s),
// a multiple of kBlockM, and its last tile ends before sequence s + 1's
// start, so every query tile of a step is whole and owned by one sequence
// (FlashAttention-3's layout). A step's lse and dsum are then one aligned
// bulk copy each, its dQ sums one bulk reduction a consumer, and the rows
// past a sequence's end read +inf and 0 (P = dS = 0 there).
template <int kBlockM>
__host__ __device__ __forceinline__ int padded_row_start(const int* cu_seqlens, int seq) {
  return (cu_seqlens[seq] + seq * kBlockM) / kBlockM * kBlockM;
}
template <int kBlockM>
__host__ __device__ __forceinline__ int64_t padded_rows(int64_t tokens, int num_seqs) {
  return (tokens + int64_t(num_seqs) * kBlockM) / kBlockM * kBlockM;
}

// The key rows of one block and the query tiles ("steps": every query head of
// its part of the kv head's group times the query tiles that see the keys) it
// walks.
struct KeyBlockSpan {
  int n0, kv_head;
  int part, first_head, heads;  // the part of the group: query heads first_head .. + heads - 1
  int q_start, len_q, kv_start, len_kv;
  int q_padded;         // the sequence's first row in the padded row space
  int shift;            // causal: query row i sees keys j <= i + shift
  int m_first, m_count;  // query tiles m_first .. m_first + m_count - 1, per head
  int steps;            // heads * m_count
};

template <class T>
__device__ __forceinline__ KeyBlockSpan key_block_span(const typename T::Params& p) {
  KeyBlockSpan b;
  // Units are (part, kv head, sequence); tile 0 is the first key block, which
  // the most queries see under the causal mask (flash_sm90_schedule.h).
  int unit, tile;
  block_unit_tile(p.order, int(blockIdx.x), unit, tile);
  b.n0 = tile * T::kBlockN;
  b.part = unit % p.group_parts;
  b.kv_head = unit / p.group_parts % p.heads_kv;
  b.heads = p.heads_q / p.heads_kv / p.group_parts;
  b.first_head = (b.kv_head * p.group_parts + b.part) * b.heads;
  const int seq = unit / p.group_parts / p.heads_kv;
  b.q_start = p.cu_seqlens_q[seq];
  b.len_q = p.cu_seqlens_q[seq + 1] - b.q_start;
  b.q_padded = padded_row_start<T::kBlockM>(p.cu_seqlens_q, seq);
  b.kv_start = p.cu_seqlens_kv[seq];
  b.len_kv = p.cu_seqlens_kv[seq + 1] - b.kv_start;
  b.shift = b.len_kv - b.len_q;
  // Causal: from the tile holding the first query that sees key n0 (row
  // n0 - shift); none when that row is past the sequence.
  b.m_first = p.causal ? max(0, b.n0 - b.shift) / T::kBlockM : 0;
  b.m_count = max(0, (b.len_q + T::kBlockM - 1) / T::kBlockM - b.m_first);
  b.steps = b.heads * b.m_count;
  return b;
}

}  // namespace bb::cuda::flash_sm90
