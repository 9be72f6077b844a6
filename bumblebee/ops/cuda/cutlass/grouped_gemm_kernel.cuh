// The expert GEMM kernels of grouped_gemm_sm90.cu as templates over the tile,
// the cluster and the schedule, with the per-call argument block they read:
// the library instantiates its two configurations (LibraryConfig,
// SmallExpertConfig), benchmarks/grouped_gemm_tiles.cu the others it measures
// against them.
// CUTLASS headers, sm_90a only; included by .cu files alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace bb::cuda::expert_gemm {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using Shape3 = ProblemShape::UnderlyingProblemShape;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;
using bf16 = cutlass::bfloat16_t;

// A configuration: the CTA tile, the cluster, and the schedule: cooperative
// (two consumer warp groups split one tile) or pingpong (each warp group takes
// its own tile, one in its mainloop while the other is in its epilogue).
template <int TileM, int TileN, int TileK, int ClusterM, int ClusterN, bool Pingpong>
struct Config {
  static constexpr int kTileM = TileM, kTileN = TileN, kTileK = TileK, kClusterM = ClusterM, kClusterN = ClusterN;
  static constexpr bool kPingpong = Pingpong;
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using MainloopSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
};

// The library's: 128x256x64 tiles, clusters of 2x1 (TMA multicast of B across
// the pair), cooperative; and the same without the cluster for the forward
// and input-gradient GEMMs of experts with few rows (grouped_gemm_sm90.cu
// says why).
using LibraryConfig = Config<128, 256, 64, 2, 1, false>;
using SmallExpertConfig = Config<128, 256, 64, 1, 1, false>;

// One GEMM kind under configuration C: bf16 A and B in the given layouts, fp32
// accumulation, D row-major in ElementD with alpha/beta (C is D). kStages: the
// mainloop stages that fit in shared memory beside the epilogue's; CUTLASS
// needs two, and below that Gemm is void (the configuration cannot take the kind).
template <typename C, typename LayoutA, typename LayoutB, typename ElementD_>
struct Kernel {
  using ElementAB = bf16;
  using ElementD = ElementD_;
  static constexpr int kAlignAB = 8;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename C::TileShape, typename C::ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementD, RowMajor*, kAlignD, ElementD,
      RowMajor*, kAlignD, typename C::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementD, float>>::CollectiveOp;

  using MainloopBuilder = cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA*, kAlignAB, ElementAB, LayoutB*,
      kAlignAB, float, typename C::TileShape, typename C::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename C::MainloopSchedule>;
  static constexpr int kStages = MainloopBuilder::PipelineStages;

  template <typename K, bool = (K::kStages >= 2)>
  struct GemmOf {
    using type = void;
  };
  template <typename K>
  struct GemmOf<K, true> {
    using type = cutlass::gemm::device::GemmUniversalAdapter<
        cutlass::gemm::kernel::GemmUniversal<ProblemShape, typename K::MainloopBuilder::CollectiveOp,
                                             typename K::Epilogue>>;
  };
  using Gemm = typename GemmOf<Kernel>::type;
};

// The four kinds of grouped_gemm_sm90.h: Forward (A K-major, B = W [n, k]
// K-major), InputGrad (B = W [k, n] N-major), WeightGrad into fp32 and bf16
// (A = dy [k, m] M-major, B = x [k, n] N-major).
template <typename C>
struct Kinds {
  using Forward = Kernel<C, RowMajor, ColumnMajor, bf16>;
  using InputGrad = Kernel<C, RowMajor, RowMajor, bf16>;
  using WeightGrad = Kernel<C, ColumnMajor, RowMajor, float>;
  using WeightGradBf16 = Kernel<C, ColumnMajor, RowMajor, bf16>;
};

inline size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

// The stride of a packed matrix with extents (extent0, extent1) in CUTLASS's
// mode order ((M, K) for A, (N, K) for B, (M, N) for D): the unit-stride mode
// is static (_1); the other mode's stride is the extent of the unit-stride one.
template <typename Stride>
Stride packed_stride(int extent0, int extent1) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<0>(s))>>::value)
    cute::get<1>(s) = int64_t(extent0);
  else
    cute::get<0>(s) = int64_t(extent1);
  return s;
}

// The per-call block a Gemm reads from device memory: problem shapes, then
// pointers to A, B and D, then strides of A, B and D (C, read when beta != 0,
// is D: same pointers, same strides), each part 16-byte aligned.
template <typename Gemm>
struct ArgBlock {
  using GemmKernel = typename Gemm::GemmKernel;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
  using ElementD = typename Gemm::ElementD;

  size_t off_a, off_b, off_d, off_sa, off_sb, off_sd, bytes;

  explicit ArgBlock(int count) {
    off_a = align16(size_t(count) * sizeof(Shape3));
    off_b = align16(off_a + size_t(count) * sizeof(void*));
    off_d = align16(off_b + size_t(count) * sizeof(void*));
    off_sa = align16(off_d + size_t(count) * sizeof(void*));
    off_sb = align16(off_sa + size_t(count) * sizeof(StrideA));
    off_sd = align16(off_sb + size_t(count) * sizeof(StrideB));
    bytes = align16(off_sd + size_t(count) * sizeof(StrideD));
  }

  // Writes the groups into the host block `h` (bytes long); host_shapes, when
  // not null, gets the shapes too (CUTLASS sizes its grid from a host copy).
  void fill(char* h, const ExpertGemmGroup* groups, int count, Shape3* host_shapes) const {
    auto* shapes = reinterpret_cast<Shape3*>(h);
    auto* pa = reinterpret_cast<const bf16**>(h + off_a);
    auto* pb = reinterpret_cast<const bf16**>(h + off_b);
    auto* pd = reinterpret_cast<ElementD**>(h + off_d);
    auto* sa = reinterpret_cast<StrideA*>(h + off_sa);
    auto* sb = reinterpret_cast<StrideB*>(h + off_sb);
    auto* sd = reinterpret_cast<StrideD*>(h + off_sd);
    for (int i = 0; i < count; ++i) {
      const ExpertGemmGroup& g = groups[i];
      shapes[i] = Shape3{g.m, g.n, g.k};
      if (host_shapes) host_shapes[i] = shapes[i];
      pa[i] = static_cast<const bf16*>(g.a);
      pb[i] = static_cast<const bf16*>(g.b);
      pd[i] = static_cast<ElementD*>(g.d);
      sa[i] = packed_stride<StrideA>(g.m, g.k);
      sb[i] = packed_stride<StrideB>(g.n, g.k);
      sd[i] = packed_stride<StrideD>(g.m, g.n);
    }
  }

  // The Gemm's arguments over the device copy `base` of the block.
  typename Gemm::Arguments arguments(char* base, int count, Shape3* host_shapes, float alpha, float beta,
                                     const cutlass::KernelHardwareInfo& hw) const {
    auto* d_pointers = reinterpret_cast<ElementD**>(base + off_d);
    auto* d_strides = reinterpret_cast<StrideD*>(base + off_sd);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {count, reinterpret_cast<Shape3*>(base), host_shapes},
        {reinterpret_cast<const bf16**>(base + off_a), reinterpret_cast<StrideA*>(base + off_sa),
         reinterpret_cast<const bf16**>(base + off_b), reinterpret_cast<StrideB*>(base + off_sb)},
        {{}, beta != 0.f ? const_cast<const ElementD**>(d_pointers) : nullptr, d_strides, d_pointers, d_strides},
        hw};
    args.epilogue.thread.alpha = alpha;
    args.epilogue.thread.beta = beta;
    return args;
  }
};

}  // namespace bb::cuda::expert_gemm
