// Raw memory on a Device: allocate, free, copy and fill.
//
// Host memory is plain aligned heap memory. CUDA memory comes from the
// stream-ordered pool of the CUDA backend; in a CPU-only build every CUDA
// request is an error that says the build has no CUDA.
#pragma once

#include <cstddef>
#include <string>

#include "bumblebee/core/device.h"

namespace bb {

void* device_alloc(size_t nbytes, Device dev);
void device_free(void* ptr, size_t nbytes, Device dev);
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);
void device_memset_zero(void* ptr, size_t nbytes, Device dev);
// Page-locked host memory (cudaMallocHost), which the GPU copies to and from
// at full bus speed; offloaded model state lives in it. In a CPU-only build
// it is ordinary host memory. Counted in device_bytes_in_use(cpu).
void* host_pinned_alloc(size_t nbytes);
void host_pinned_free(void* ptr, size_t nbytes);

bool cuda_built();        // was this library compiled with the CUDA backend
int cuda_device_count();  // 0 when not built with CUDA or no GPU is visible
size_t device_bytes_in_use(Device dev);   // current bytes held by tensors on dev
size_t device_peak_bytes(Device dev);     // high-water mark since the last reset
void device_reset_peak(Device dev);
// The pool keeps freed blocks for the next step; this waits for dev's work
// and hands every unused block back to the driver, so other processes (or an
// inference engine in this one) can have it. No-op on the host.
void device_release_cached(Device dev);
// cudaMemGetInfo of dev: what the driver has free and in all. On the host
// both are 0 (not measured).
struct DeviceMemoryInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemoryInfo device_memory_info(Device dev);
// The PCI bus id of a CUDA device ("0000:19:00.0"); empty on the host.
std::string device_pci_bus_id(Device dev);
void device_synchronize(Device dev);      // wait for all work queued on dev (no-op on the host)
// Makes dev the calling thread's current CUDA device, so that libraries
// which allocate on the current device (NCCL, cuDNN, cuBLASLt) use it too.
void device_make_current(Device dev);     // no-op on the host

}  // namespace bb
