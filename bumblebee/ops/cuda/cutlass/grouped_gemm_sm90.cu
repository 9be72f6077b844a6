// CUTLASS 3 Hopper ptr-array grouped GEMM for the MoE experts (see
// grouped_gemm_sm90.h). Compiled for sm_90a alone (wgmma and TMA need it).
//
// One tile configuration for every case: 128x256x64 tiles, the cooperative
// warp-specialized schedule (two consumer warp groups share a tile), clusters
// of 2x1 (TMA multicast of B across the pair). benchmarks/grouped_gemm_tiles.cu
// measured nine tile, cluster and schedule choices at the Qwen3-30B-A3B (~512
// rows an expert) and DeepSeek-V3 (~2,048) expert shapes: clusters of 1x1 are
// 2 % faster on the first and 3 % slower on the second, and no other choice is
// faster on both, so one set of four kernels keeps the compile to a few minutes.
//
// The row-major problems map directly onto CUTLASS's D [M, N] = A [M, K] B [K, N]
// with D row-major: Forward has A K-major (RowMajor) and B K-major
// (ColumnMajor, W [n, k]); InputGrad B N-major (RowMajor, W [k, n]);
// WeightGrad A M-major (ColumnMajor, dy [k, m]) and B N-major (x [k, n]).
//
// Per-call arguments (problem shapes, A/B/C/D pointers and strides) are packed
// into one pinned host block and copied to stream-ordered device scratch with
// one cudaMemcpyAsync. The pinned blocks form a ring per device; a block is
// reused only after the event recorded behind its last copy has completed, so
// the host never overwrites a block the GPU has yet to read.
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/error.h"
#include "bumblebee/core/tensor.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace bb::cuda {
namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

template <typename LayoutA, typename LayoutB, typename ElementD>
struct GroupedKernel {
  using ElementAB = cutlass::bfloat16_t;
  using TileShape = cute::Shape<_128, _256, _64>;
  using ClusterShape = cute::Shape<_2, _1, _1>;
  static constexpr int kAlignAB = 8;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementD, RowMajor*, kAlignD, ElementD,
      RowMajor*, kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementD, float>>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA*, kAlignAB, ElementAB, LayoutB*,
      kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// A pinned host block per slot of a ring, with the event behind its last copy.
struct StagingSlot {
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t copied = nullptr;
};

constexpr int kMaxDevices = 64;
constexpr int kStagingSlots = 32;

struct Staging {
  std::mutex mutex;
  std::array<std::array<StagingSlot, kStagingSlots>, kMaxDevices> slots;
  std::array<int, kMaxDevices> next{};
  std::array<int, kMaxDevices> sm_count{};
};

Staging& staging() {
  static Staging s;
  return s;
}

size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

// The stride of a packed matrix with extents (extent0, extent1) in CUTLASS's
// mode order ((M, K) for A, (N, K) for B, (M, N) for D): the unit-stride mode
// is static (_1); the other mode's stride is the extent of the unit-stride one.
template <typename Stride>
Stride packed_stride(int extent0, int extent1) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(get<0>(s))>>::value) get<1>(s) = int64_t(extent0);
  else get<0>(s) = int64_t(extent1);
  return s;
}

template <typename Config>
void run(const std::vector<ExpertGemmGroup>& groups, float alpha, float beta) {
  using Gemm = typename Config::Gemm;
  using Kernel = typename Gemm::GemmKernel;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  using ElementAB = typename Config::ElementAB;
  using ElementD = typename Gemm::ElementD;

  const int count = int(groups.size());
  // The block: shapes, then pointers to A, B and D, then strides of A, B and D
  // (C, read when beta != 0, is D: same pointers, same strides).
  const size_t off_shapes = 0;
  const size_t off_a = align16(off_shapes + count * sizeof(Shape3));
  const size_t off_b = align16(off_a + count * sizeof(void*));
  const size_t off_d = align16(off_b + count * sizeof(void*));
  const size_t off_sa = align16(off_d + count * sizeof(void*));
  const size_t off_sb = align16(off_sa + count * sizeof(StrideA));
  const size_t off_sd = align16(off_sb + count * sizeof(StrideB));
  const size_t bytes = align16(off_sd + count * sizeof(StrideD));

  const int device = current_device();
  BB_CHECK(device >= 0 && device < kMaxDevices, "grouped_gemm (CUTLASS): CUDA device ", device, " is beyond the ",
           kMaxDevices, " devices it keeps staging buffers for");
  cudaStream_t stream = current_stream();
  Tensor scratch = Tensor::empty({int64_t(bytes / 8)}, DType::I64, Device::cuda(device));
  auto* base = static_cast<char*>(scratch.raw());
  std::vector<Shape3> host_shapes(groups.size());
  int sm_count = 0;
  {
    Staging& s = staging();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.sm_count[size_t(device)] == 0)
      CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count[size_t(device)], cudaDevAttrMultiProcessorCount, device));
    sm_count = s.sm_count[size_t(device)];
    StagingSlot& slot = s.slots[size_t(device)][size_t(s.next[size_t(device)])];
    s.next[size_t(device)] = (s.next[size_t(device)] + 1) % kStagingSlots;
    if (slot.copied) CUDA_CHECK(cudaEventSynchronize(slot.copied));
    else CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
    if (slot.capacity < bytes) {
      if (slot.host) CUDA_CHECK(cudaFreeHost(slot.host));
      CUDA_CHECK(cudaMallocHost(&slot.host, bytes));
      slot.capacity = bytes;
    }
    auto* h = static_cast<char*>(slot.host);
    auto* shapes = reinterpret_cast<Shape3*>(h + off_shapes);
    auto* pa = reinterpret_cast<const ElementAB**>(h + off_a);
    auto* pb = reinterpret_cast<const ElementAB**>(h + off_b);
    auto* pd = reinterpret_cast<ElementD**>(h + off_d);
    auto* sa = reinterpret_cast<StrideA*>(h + off_sa);
    auto* sb = reinterpret_cast<StrideB*>(h + off_sb);
    auto* sd = reinterpret_cast<StrideD*>(h + off_sd);
    for (int i = 0; i < count; ++i) {
      const ExpertGemmGroup& g = groups[size_t(i)];
      shapes[i] = Shape3{g.m, g.n, g.k};
      host_shapes[size_t(i)] = shapes[i];
      pa[i] = static_cast<const ElementAB*>(g.a);
      pb[i] = static_cast<const ElementAB*>(g.b);
      pd[i] = static_cast<ElementD*>(g.d);
      sa[i] = packed_stride<StrideA>(g.m, g.k);
      sb[i] = packed_stride<StrideB>(g.n, g.k);
      sd[i] = packed_stride<StrideD>(g.m, g.n);
    }
    CUDA_CHECK(cudaMemcpyAsync(base, h, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  }

  auto* d_pointers = reinterpret_cast<ElementD**>(base + off_d);
  auto* d_strides = reinterpret_cast<StrideD*>(base + off_sd);
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = sm_count;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {count, reinterpret_cast<Shape3*>(base + off_shapes), host_shapes.data()},
      {reinterpret_cast<const ElementAB**>(base + off_a), reinterpret_cast<StrideA*>(base + off_sa),
       reinterpret_cast<const ElementAB**>(base + off_b), reinterpret_cast<StrideB*>(base + off_sb)},
      {{}, beta != 0.f ? const_cast<const ElementD**>(d_pointers) : nullptr, d_strides, d_pointers, d_strides},
      hw};
  args.epilogue.thread.alpha = alpha;
  args.epilogue.thread.beta = beta;
  // The scheduler's raster order: CUTLASS's heuristic rather than its default
  // AlongM, 5 % faster over a Qwen3-30B-A3B layer's six expert GEMMs and 13 %
  // over DeepSeek-V3's (benchmarks/grouped_gemm_tiles.cu, RESULTS.md).
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;

  Gemm gemm;
  const cutlass::Status can = gemm.can_implement(args);
  BB_CHECK(can == cutlass::Status::kSuccess, "grouped_gemm (CUTLASS): the kernel cannot take these ", count,
           " groups: ", cutlassGetStatusString(can));
  const size_t workspace_bytes = Gemm::get_workspace_size(args);
  Tensor workspace = Tensor::empty({int64_t(std::max<size_t>(workspace_bytes, 1))}, DType::U8, Device::cuda(device));
  cutlass::Status st = gemm.initialize(args, workspace.raw(), stream);
  BB_CHECK(st == cutlass::Status::kSuccess, "grouped_gemm (CUTLASS): initialize failed: ",
           cutlassGetStatusString(st));
  st = gemm.run(stream);
  BB_CHECK(st == cutlass::Status::kSuccess, "grouped_gemm (CUTLASS): launch failed: ", cutlassGetStatusString(st));
  CUDA_CHECK(cudaGetLastError());
}

using ForwardKernel = GroupedKernel<RowMajor, ColumnMajor, cutlass::bfloat16_t>;
using InputGradKernel = GroupedKernel<RowMajor, RowMajor, cutlass::bfloat16_t>;
using WeightGradKernel = GroupedKernel<ColumnMajor, RowMajor, float>;
using WeightGradBf16Kernel = GroupedKernel<ColumnMajor, RowMajor, cutlass::bfloat16_t>;

}  // namespace

bool cutlass_grouped_gemm_takes(ExpertGemm kind, DType ab, DType d) {
  if (ab != DType::BF16) return false;
  return d == DType::BF16 || (kind == ExpertGemm::WeightGrad && d == DType::F32);
}

void cutlass_grouped_gemm(ExpertGemm kind, DType d, const std::vector<ExpertGemmGroup>& groups, float alpha,
                          float beta) {
  if (groups.empty()) return;
  switch (kind) {
    case ExpertGemm::Forward: return run<ForwardKernel>(groups, alpha, beta);
    case ExpertGemm::InputGrad: return run<InputGradKernel>(groups, alpha, beta);
    case ExpertGemm::WeightGrad:
      if (d == DType::F32) return run<WeightGradKernel>(groups, alpha, beta);
      return run<WeightGradBf16Kernel>(groups, alpha, beta);
  }
}

}  // namespace bb::cuda
