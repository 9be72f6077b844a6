// The pinned host blocks the expert GEMM launches (grouped_gemm_sm90_run.cuh)
// stage their per-call arguments in: a ring of slots per device, each reused
// only after the event recorded behind its last copy has completed.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <mutex>

namespace bb::cuda::expert_gemm {

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

// The rings of every device, one for the process (grouped_gemm_sm90.cu).
Staging& staging();

}  // namespace bb::cuda::expert_gemm
