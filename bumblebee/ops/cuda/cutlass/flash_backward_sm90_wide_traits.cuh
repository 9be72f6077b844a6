// Compile-time traits of the sm_90a flash attention backward at multi-head
// latent attention's head dims, q/k 192 and v 128 (DeepSeek-V3), in
// FlashAttention-3's Hopper configuration for them: query tiles of 64, key
// blocks of 96 split along the keys over the two consumers (48 each), S and
// dP as (queries, keys), dK and dV transposed as (head dim, keys), dQ with
// the head dim split over the consumers. A consumer then holds 72 + 48
// accumulator registers of dK^T and dV^T where BackwardTraits' 64 keys over
// the whole head dims would take 160, which with S, dP and dQ is more than a
// thread has. P and dS reach the dK^T, dV^T and dQ GEMMs through shared
// memory. The consumer loop is flash_backward_sm90_wide.cuh; the producer,
// warp 1, BackwardConfig's parts and the host side are those of
// BackwardTraits.
#pragma once

#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_traits.cuh"

namespace bb::cuda::flash_sm90 {

struct WideBackwardTiles {
  static constexpr int kHeadDimQk = 192, kHeadDimV = 128;
  static constexpr int kBlockN = 96;  // key rows per block
  static constexpr int kBlockM = 64;  // query rows per step
  static constexpr int kStages = 2;
  static constexpr int kConsumers = 2;
  static constexpr int kConsumerKeys = kBlockN / kConsumers;
  static constexpr int kMmaThreads = 128 * kConsumers;
  static constexpr int kThreads = kMmaThreads + 128;
  static constexpr int kDqCols = kHeadDimQk / kConsumers;  // dQ columns per consumer
  static constexpr int kDqTileFloats = kBlockM * kDqCols;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;

  using Element = cutlass::bfloat16_t;
  using BlockM = Int<kBlockM>;
  using BlockN = Int<kBlockN>;
  using HeadDimQk = Int<kHeadDimQk>;
  using HeadDimV = Int<kHeadDimV>;
  using ConsumerKeys = Int<kConsumerKeys>;

  // S = Q K^T and dP = dO V^T, (queries, keys): a consumer takes 48 keys
  // (the atom does not depend on the reduction's length, 192 or 128).
  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockM, ConsumerKeys, HeadDimV>>(),
      Layout<Shape<_1, _2, _1>>{}));
  // dV^T += dO^T P and dK^T += Q^T dS, (head dim, keys): a consumer's 48 keys
  // over the whole head dim; dO^T and Q^T are head-dim-contiguous views of
  // the tiles, P and dS keys-contiguous ones.
  using TiledMmaKV = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<HeadDimV, ConsumerKeys, BlockM>, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      Layout<Shape<_1, _2, _1>>{}));
  // dQ = dS K, (queries, head dim): dS of both consumers' keys, each consumer
  // half the head dim.
  using TiledMmaQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BlockM, Int<kDqCols>, BlockN>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      Layout<Shape<_1, _2, _1>>{}));

  // N = 48 atoms are CuTe's extended wgmma shapes (CMakeLists.txt switches them
  // on for this kernel); without them the selectors fall back to N = 16, a
  // third of the work a wgmma for the same operand reads (measured 260 TFLOP/s).
  static_assert(size<1>(typename TiledMmaSdP::AtomShape_MNK{}) == kConsumerKeys &&
                    size<1>(typename TiledMmaKV::AtomShape_MNK{}) == kConsumerKeys,
                "flash_backward_sm90 at (192, 128) needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED");

  // Q and dO: head-dim-contiguous for S and dP, read transposed by dK^T and
  // dV^T in 64-row atoms, the 128-byte swizzle's width. K: the same for S, and
  // read as K^T by dQ, whose consumers split its head dim at 96, so its atom
  // may be no wider than 32 columns. V: only for dP.
  using SmemAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockM,
                                                                                 HeadDimQk>());
  using SmemAtomdO = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockM,
                                                                                  HeadDimV>());
  using SmemAtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockN,
                                                                                 Int<kDqCols>>());
  using SmemAtomV = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, BlockN,
                                                                                 HeadDimV>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQ{}, Shape<BlockM, HeadDimQk, Int<kStages>>{}));
  using SmemLayoutdO = decltype(tile_to_shape(SmemAtomdO{}, Shape<BlockM, HeadDimV, Int<kStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK{}, Shape<BlockN, HeadDimQk>{}));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtomV{}, Shape<BlockN, HeadDimV>{}));
  // The transposes as views of the same bytes: (head dim, rows[, stages]).
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{},
      make_layout(Shape<HeadDimQk, BlockM, Int<kStages>>{}, Stride<BlockM, _1, Int<kBlockM * kHeadDimQk>>{})));
  using SmemLayoutdOt = decltype(composition(
      SmemLayoutdO{},
      make_layout(Shape<HeadDimV, BlockM, Int<kStages>>{}, Stride<BlockM, _1, Int<kBlockM * kHeadDimV>>{})));
  using SmemLayoutKt =
      decltype(composition(SmemLayoutK{}, make_layout(Shape<HeadDimQk, BlockN>{}, Stride<BlockN, _1>{})));
  // P and dS, (queries, keys), keys contiguous: dQ's A operand, and as
  // (keys, queries) views the B operand of dV^T and dK^T, where the second
  // consumer's keys start at 48, a multiple of the 32-byte swizzle's 16
  // columns (the wider atoms would split them). P has one buffer (a consumer
  // reads only its own keys of it, and has finished the step before writing
  // the next); dS one a pipeline stage, as in BackwardTraits, since both
  // consumers' dQ read all of it.
  using SmemAtomPdS = GMMA::Layout_K_SW32_Atom<Element>;
  using SmemLayoutP = decltype(tile_to_shape(SmemAtomPdS{}, Shape<BlockM, BlockN>{}));
  using SmemLayoutdS = decltype(tile_to_shape(SmemAtomPdS{}, Shape<BlockM, BlockN, Int<kStages>>{}));
  using SmemLayoutPt =
      decltype(composition(SmemLayoutP{}, make_layout(Shape<BlockN, BlockM>{}, Stride<BlockM, _1>{})));
  using SmemLayoutdSt = decltype(composition(
      SmemLayoutdS{}, make_layout(Shape<BlockN, BlockM, Int<kStages>>{}, Stride<BlockM, _1, Int<kBlockM * kBlockN>>{})));

  static constexpr bool kScoresTransposed = false;  // consume_steps_wide (flash_backward_sm90_wide.cuh)
  static constexpr int kPElements = cosize_v<SmemLayoutP>;
};

using BackwardTraitsWide = BackwardConfig<WideBackwardTiles>;

}  // namespace bb::cuda::flash_sm90
