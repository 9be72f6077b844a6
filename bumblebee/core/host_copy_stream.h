// HostCopyStream: copies between pinned host memory and a device on a stream
// of their own, so that they overlap the kernels queued on the backend's
// compute stream (the optimizer's host-resident state: gradients down,
// updated weights up, while the device steps its own part).
//
// On the host (a CPU runtime) every copy happens when it is queued and the
// ordering calls do nothing, so the same caller runs on both backends.
#pragma once

#include "bumblebee/core/device.h"
#include "bumblebee/core/tensor.h"

namespace bb {

namespace cuda {
struct CopyStream;
}

class HostCopyStream {
 public:
  explicit HostCopyStream(Device dev);
  ~HostCopyStream();
  HostCopyStream(const HostCopyStream&) = delete;
  HostCopyStream& operator=(const HostCopyStream&) = delete;

  // Copies queued from now on start after the work queued so far on the
  // compute stream (and after its pooled allocations).
  void wait_for_compute();
  // Queues dst <- src: same dtype and numel, one side on the device and the
  // other in pinned host memory (or both on the host for a CPU runtime).
  void copy(Tensor dst, const Tensor& src);
  // Blocks the calling thread until every queued copy is done.
  void synchronize();
  // Work queued on the compute stream from now on starts after every copy queued so far.
  void compute_waits();

 private:
  Device dev_;
  cuda::CopyStream* stream_ = nullptr;   // null on the host
};

}  // namespace bb
