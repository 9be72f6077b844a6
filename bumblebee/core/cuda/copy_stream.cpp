// A copy stream beside the compute stream, ordered against it with events.
#include "bumblebee/core/cuda/copy_stream.h"

#include <cstdio>

#include "bumblebee/core/cuda/cuda_context.h"

namespace bb::cuda {

struct CopyStream {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;   // reused: each wait is queued before the next record
};

CopyStream* copy_stream_create(int device) {
  DeviceGuard guard(device);
  auto* s = new CopyStream{device};
  // Non-blocking: a copy must not wait for the legacy default stream, which
  // the backend's own (blocking) compute stream is ordered with.
  CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&s->event, cudaEventDisableTiming));
  return s;
}

void copy_stream_destroy(CopyStream* s) {
  // Called from destructors, so it reports instead of throwing.
  DeviceGuard guard(s->device);
  const cudaError_t sync = cudaStreamSynchronize(s->stream);
  if (sync != cudaSuccess && sync != cudaErrorCudartUnloading)
    std::fprintf(stderr, "bumblebee: copy stream of cuda:%d failed: %s\n", s->device, cudaGetErrorString(sync));
  cudaEventDestroy(s->event);
  cudaStreamDestroy(s->stream);
  delete s;
}

void copy_stream_wait_for_compute(CopyStream* s) {
  DeviceGuard guard(s->device);
  CUDA_CHECK(cudaEventRecord(s->event, current_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(s->stream, s->event, 0));
}

void copy_stream_copy(CopyStream* s, void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(s->device);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s->stream));
}

void copy_stream_synchronize(CopyStream* s) {
  DeviceGuard guard(s->device);
  CUDA_CHECK(cudaStreamSynchronize(s->stream));
}

void copy_stream_compute_waits(CopyStream* s) {
  DeviceGuard guard(s->device);
  CUDA_CHECK(cudaEventRecord(s->event, s->stream));
  CUDA_CHECK(cudaStreamWaitEvent(current_stream(), s->event, 0));
}

}  // namespace bb::cuda
