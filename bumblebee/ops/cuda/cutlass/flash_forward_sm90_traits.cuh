// Compile-time traits of the sm_90a flash attention forward
// (flash_forward_sm90_kernel.cuh): tile shapes, warpgroup roles and register
// budgets, shared-memory layouts, the wgmma and TMA types, the kernel
// parameters, and the query / key span of one block.
#pragma once

#include "bumblebee/ops/cuda/cutlass/flash_sm90_cute.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_sm90_schedule.h"

namespace bb::cuda::flash_sm90 {

// DQK is the q/k head dim, DV the v / out head dim; both exact (no padding):
// the TMA boxes are the head dims.
//
// At head dim 64 a block has three consumer warpgroups (FlashAttention-3's
// 192-row tiles there): a K / V tile carries half the FLOPs of one at head
// dim 128, so each load serves 192 query rows instead of 128, and the
// consumers' accumulators (S 64, O 32 and P 32 registers) fit the 160 a
// thread that four warpgroups leave.
template <int DQK, int DV>
struct ForwardTraits {
  static constexpr int kHeadDimQk = DQK, kHeadDimV = DV;
  static constexpr int kConsumers = DQK == 64 && DV == 64 ? 3 : 2;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per block, 64 per consumer warpgroup
  static constexpr int kBlockN = 128;              // key rows per tile
  static constexpr int kStages = 2;
  static constexpr int kMmaThreads = 128 * kConsumers;
  static constexpr int kThreads = kMmaThreads + 128;
  // 128 x 24 + 256 x 240 = 64,512 of the SM's 65,536 registers; with three
  // consumers 128 x 24 + 384 x 160 = 64,512.
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;

  using Element = cutlass::bfloat16_t;
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using HeadQk = Int<DQK>;
  using HeadV = Int<DV>;

  // Each consumer warpgroup takes 64 rows of M; the atom layout splits M over them.
  using ConsumerLayout = Layout<Shape<Int<kConsumers>, _1, _1>>;
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockM, BlockN, HeadQk>>(), ConsumerLayout{}));
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<BlockM, HeadV, BlockN>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      ConsumerLayout{}));

  // Q and K K-major (head dim contiguous) in 128-byte swizzled atoms of 8 x 64.
  // V is read as V^T [DV, kBlockN], the B operand of P V, which is MN-major
  // (V's head dim is contiguous in memory); as in CUTLASS's GEMMs, MN-major
  // atoms are tiled along K first.
  using SmemLayoutQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<BlockM, HeadQk>{}));
  using SmemLayoutK =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<BlockN, HeadQk, Int<kStages>>{}));
  using SmemLayoutVt = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                                              Shape<HeadV, BlockN, Int<kStages>>{}, Step<_2, _1, _3>{}));

  static constexpr uint32_t kQBytes = kBlockM * DQK * sizeof(Element);
  static constexpr uint32_t kKBytes = kBlockN * DQK * sizeof(Element);
  static constexpr uint32_t kVBytes = kBlockN * DV * sizeof(Element);

  // The packed tensors as TMA sees them: (tokens, head dim, heads) for q and
  // k, and v transposed to (head dim, tokens, heads).
  using GmemShape = Shape<int32_t, int32_t, int32_t>;
  using GmemStrideQK = Stride<int64_t, _1, int64_t>;
  using GmemStrideVt = Stride<_1, int64_t, int64_t>;
  using GmemPtr = decltype(make_gmem_ptr(static_cast<const Element*>(nullptr)));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, make_tensor(GmemPtr{}, GmemShape{}, GmemStrideQK{}),
                                      SmemLayoutQ{}, Shape<BlockM, HeadQk>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, make_tensor(GmemPtr{}, GmemShape{}, GmemStrideQK{}),
                                      take<0, 2>(SmemLayoutK{}), Shape<BlockN, HeadQk>{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, make_tensor(GmemPtr{}, GmemShape{}, GmemStrideVt{}),
                                      take<0, 2>(SmemLayoutVt{}), Shape<HeadV, BlockN>{}, _1{}));

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename cutlass::PipelineState<kStages>;

  // The 128-byte swizzle repeats every 1024 bytes; TMA and wgmma need each
  // buffer on that grid.
  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutVt>, 1024> v;
    uint64_t q_full;  // mbarrier: the Q tile has landed
    typename Pipeline::SharedStorage k_pipeline, v_pipeline;
  };

  struct Params {
    TmaQ tma_q;
    TmaK tma_k;
    TmaV tma_v;
    int tokens_q, tokens_kv, heads_q, heads_kv;
    const int* cu_seqlens_q;   // [S + 1]
    const int* cu_seqlens_kv;  // [S + 1]
    BlockOrder order;          // units (query head, sequence) x query tiles
    bool causal;               // diagonal bottom-right, as flash_common.cuh's Params
    float scale_log2;          // softmax scale * log2(e)
    Element* out;              // [tokens_q, heads_q, DV]
    float* lse;                // [tokens_q, heads_q], natural log
  };
};

// The query / key rows of one block, from its index.
struct BlockSpan {
  int m_block, head, kv_head;
  int q_start, len_q, kv_start, len_kv;
  int shift;    // causal: query row i sees keys j <= i + shift
  int n_tiles;  // key tiles this block visits
};

template <class T>
__device__ __forceinline__ BlockSpan block_span(const typename T::Params& p) {
  BlockSpan b;
  // Units are (query head, sequence); tile 0 is the last query tile, which
  // sees the most keys under the causal mask (flash_sm90_schedule.h).
  int unit, tile;
  block_unit_tile(p.order, int(blockIdx.x), unit, tile);
  b.m_block = p.order.tiles - 1 - tile;
  b.head = unit % p.heads_q;
  b.kv_head = b.head / (p.heads_q / p.heads_kv);
  const int seq = unit / p.heads_q;
  b.q_start = p.cu_seqlens_q[seq];
  b.len_q = p.cu_seqlens_q[seq + 1] - b.q_start;
  b.kv_start = p.cu_seqlens_kv[seq];
  b.len_kv = p.cu_seqlens_kv[seq + 1] - b.kv_start;
  b.shift = b.len_kv - b.len_q;
  const int m_end = min(b.len_q, (b.m_block + 1) * T::kBlockM);
  // Causal: keys up to the diagonal of the block's last query row (none when
  // even that row precedes the first key).
  const int kv_end = p.causal ? max(0, min(b.len_kv, m_end + b.shift)) : b.len_kv;
  b.n_tiles = (kv_end + T::kBlockN - 1) / T::kBlockN;
  return b;
}

}  // namespace bb::cuda::flash_sm90
