// The launch of one expert GEMM kernel of grouped_gemm_kernel.cuh, shared by
// the units that instantiate them (grouped_gemm_sm90_fprop.cu, _dgrad.cu,
// _wgrad.cu: one GEMM role a unit, so nvcc compiles them side by side).
//
// Per-call arguments (problem shapes, A/B/C/D pointers and strides) are packed
// into one pinned host block and copied to stream-ordered device scratch with
// one cudaMemcpyAsync. The pinned blocks form a ring per device; a block is
// reused only after the event recorded behind its last copy has completed, so
// the host never overwrites a block the GPU has yet to read.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/error.h"
#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_kernel.cuh"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_staging.h"

namespace bb::cuda::expert_gemm {

// One launch of kernel K (grouped_gemm_kernel.cuh's Kinds) for `groups`.
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

}  // namespace bb::cuda::expert_gemm
