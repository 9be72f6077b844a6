// Timing events for op_profile, kept in a pool so that profiling a step
// creates events only on its first pass.
#include "bumblebee/ops/cuda/event_timing.h"

#include <vector>

#include "bumblebee/core/cuda/cuda_context.h"

namespace bb::cuda {
namespace {

struct TimingEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

std::vector<TimingEvent> g_pool;
size_t g_used = 0;

}  // namespace

int record_timing_event(int device) {
  DeviceGuard guard(device);
  if (g_used == g_pool.size() || g_pool[g_used].device != device) {
    if (g_used == g_pool.size()) g_pool.emplace_back();
    TimingEvent& e = g_pool[g_used];
    if (e.event) {
      DeviceGuard owner(e.device);
      CUDA_CHECK(cudaEventDestroy(e.event));
    }
    CUDA_CHECK(cudaEventCreate(&e.event));
    e.device = device;
  }
  CUDA_CHECK(cudaEventRecord(g_pool[g_used].event, current_stream()));
  return int(g_used++);
}

double timing_elapsed_ms(int first, int second) {
  const TimingEvent& b = g_pool[size_t(second)];
  DeviceGuard guard(b.device);
  CUDA_CHECK(cudaEventSynchronize(b.event));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, g_pool[size_t(first)].event, b.event));
  return double(ms);
}

void release_timing_events() { g_used = 0; }

}  // namespace bb::cuda
