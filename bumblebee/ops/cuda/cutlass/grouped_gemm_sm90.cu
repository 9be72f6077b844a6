// CUTLASS 3 Hopper ptr-array grouped GEMM for the MoE experts (see
// grouped_gemm_sm90.h). Compiled for sm_90a alone (wgmma and TMA need it).
//
// 128x256x64 tiles and the cooperative warp-specialized schedule (two
// consumer warp groups share a tile) for every case, with clusters of 2x1 (TMA
// multicast of B across the pair) or, for the forward and input-gradient
// GEMMs of experts averaging fewer than kSmallExpertRows rows, 1x1.
// benchmarks/grouped_gemm_tiles.cu measured nine tile, cluster and schedule
// choices at the Qwen3-30B-A3B (~512 rows an expert) and DeepSeek-V3 (~2,048)
// expert shapes: no tile or schedule beats this one on both; clusters of 1x1
// take 4-7 % off the forward and input-gradient GEMMs at ~512 rows (the pair's
// multicast saves less than the cluster's tile pairing costs on short
// problems) and add up to 3 % at ~2,048; on the weight gradients, where the
// rows are the reduction, the two are within 1 %.
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

#include <algorithm>

#include <array>
#include <mutex>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/error.h"
#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_kernel.cuh"

namespace bb::cuda {
namespace {

using namespace expert_gemm;

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

template <typename K>
void run(const std::vector<ExpertGemmGroup>& groups, float alpha, float beta) {
  using Gemm = typename K::Gemm;
  const int count = int(groups.size());
  const ArgBlock<Gemm> block(count);
  const size_t bytes = block.bytes;

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
    block.fill(h, groups.data(), count, host_shapes.data());
    CUDA_CHECK(cudaMemcpyAsync(base, h, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  }

  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = sm_count;
  typename Gemm::Arguments args = block.arguments(base, count, host_shapes.data(), alpha, beta, hw);
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

using Library = Kinds<LibraryConfig>;
using SmallExperts = Kinds<SmallExpertConfig>;

// Between the two measured shapes (~512 and ~2,048 rows an expert).
constexpr int64_t kSmallExpertRows = 1024;

// Whether the groups' rows (m) average fewer than kSmallExpertRows.
bool small_experts(const std::vector<ExpertGemmGroup>& groups) {
  int64_t rows = 0;
  for (const ExpertGemmGroup& g : groups) rows += g.m;
  return rows < kSmallExpertRows * int64_t(groups.size());
}

}  // namespace

bool cutlass_grouped_gemm_takes(ExpertGemm kind, DType ab, DType d) {
  if (ab != DType::BF16) return false;
  return d == DType::BF16 || (kind == ExpertGemm::WeightGrad && d == DType::F32);
}

void cutlass_grouped_gemm(ExpertGemm kind, DType d, const std::vector<ExpertGemmGroup>& groups, float alpha,
                          float beta) {
  if (groups.empty()) return;
  switch (kind) {
    case ExpertGemm::Forward:
      if (small_experts(groups)) return run<SmallExperts::Forward>(groups, alpha, beta);
      return run<Library::Forward>(groups, alpha, beta);
    case ExpertGemm::InputGrad:
      if (small_experts(groups)) return run<SmallExperts::InputGrad>(groups, alpha, beta);
      return run<Library::InputGrad>(groups, alpha, beta);
    case ExpertGemm::WeightGrad:
      if (d == DType::F32) return run<Library::WeightGrad>(groups, alpha, beta);
      return run<Library::WeightGradBf16>(groups, alpha, beta);
  }
}

}  // namespace bb::cuda
