// Raw memory on a Device: allocate, free, copy and fill.
//
// Host memory is plain aligned heap memory. CUDA memory comes from the
// stream-ordered pool of the CUDA backend; in a CPU-only build every CUDA
// request is an error that says the build has no CUDA.
#pragma once

#include <cstddef>

#include "bumblebee/core/device.h"

namespace bb {

void* device_alloc(size_t nbytes, Device dev);
void device_free(void* ptr, size_t nbytes, Device dev);
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);
void device_memset_zero(void* ptr, size_t nbytes, Device dev);

bool cuda_built();        // was this library compiled with the CUDA backend
int cuda_device_count();  // 0 when not built with CUDA or no GPU is visible
size_t device_bytes_in_use(Device dev);   // current bytes held by tensors on dev
size_t device_peak_bytes(Device dev);     // high-water mark since the last reset
void device_reset_peak(Device dev);
void device_synchronize(Device dev);      // wait for all work queued on dev (no-op on the host)
// Makes dev the calling thread's current CUDA device, so that libraries
// which allocate on the current device (NCCL, cuDNN, cuBLASLt) use it too.
void device_make_current(Device dev);     // no-op on the host

}  // namespace bb
