// CUDA device memory for core/: the stream-ordered pool, copies, casts.
// Plain C++ declarations, so tensor.cpp compiles in CPU-only builds; defined
// in cuda_memory.cu beside this file, which only CUDA builds compile.
//
// Every allocation comes from a cudaMallocAsync pool on the current stream,
// so a training step does no cudaMalloc after the first one; an
// out-of-memory error names the request and the bytes in use.
#pragma once

#include <cstddef>
#include <string>

#include "bumblebee/core/dtype.h"

namespace bb::cuda {

int device_count();
void* pool_alloc(size_t nbytes, int device);
void pool_free(void* ptr, size_t nbytes, int device);
size_t pool_bytes_in_use(int device);
size_t pool_peak_bytes(int device);
void pool_reset_peak(int device);
// Waits for the device's work, then trims its pool to the blocks in use.
void pool_release_unused(int device);
void memory_info(int device, size_t* free_bytes, size_t* total_bytes);
// The device's PCI bus id ("0000:19:00.0"), which names it to NVML whatever
// CUDA_VISIBLE_DEVICES renumbers.
std::string pci_bus_id(int device);
// Page-locked host memory (cudaMallocHost / cudaFreeHost).
void* pinned_alloc(size_t nbytes);
void pinned_free(void* ptr, size_t nbytes);
// `device` is the GPU whose stream orders the work (for a copy, the device
// side; both sides of a device-to-device copy are on it or peers of it).
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t nbytes, int device);
void memset_zero(void* ptr, size_t nbytes, int device);
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, int device);
void synchronize(int device);
// Makes `device` the calling thread's current CUDA device.
void set_device(int device);

}  // namespace bb::cuda
