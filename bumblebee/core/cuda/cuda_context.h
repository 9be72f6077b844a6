// Per-device state of the CUDA backend and the checks around every CUDA call.
//
// Each device has one current stream (every kernel, copy and pooled
// allocation of the backend is ordered on it), a cuBLASLt handle and a
// cuBLASLt workspace, all created on first use and kept for the life of the
// process. CUDA_CHECK / CUBLAS_CHECK turn a failed call into a bb::Error that
// names the call, the error string and the source line; CUDA_CHECK_LAUNCH does
// the same for the last kernel launch (and, with BB_CUDA_SYNC_CHECK=1 in the
// environment, synchronises so that an asynchronous fault is reported at the
// kernel that caused it).
//
// Included only by sources under core/cuda, ops/cuda and the NCCL communicator,
// which CPU-only builds skip.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace bb::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
void check_launch(const char* kernel, const char* file, int line);

int current_device();
// The stream every op of the backend runs on, for the current device. The
// backend's own stream is a blocking stream, so work on the legacy default
// stream (a plain cudaMemcpy elsewhere) is still ordered with it.
cudaStream_t current_stream();
// Makes `stream` current for the current device; nullptr restores the
// backend's own stream. Used to overlap communication with compute.
void set_current_stream(cudaStream_t stream);

cublasLtHandle_t cublaslt_handle();
// cuBLASLt workspace of the current device, `cublaslt_workspace_bytes()` long.
void* cublaslt_workspace();
size_t cublaslt_workspace_bytes();

// Properties of the current device, read once.
const cudaDeviceProp& device_properties();

// Makes `device` current for the scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace bb::cuda

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t bb_cuda_err_ = (call);                                                \
    if (bb_cuda_err_ != cudaSuccess)                                                  \
      ::bb::cuda::throw_cuda_error(bb_cuda_err_, #call, __FILE__, __LINE__);          \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    cublasStatus_t bb_cublas_status_ = (call);                                        \
    if (bb_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::bb::cuda::throw_cublas_error(bb_cublas_status_, #call, __FILE__, __LINE__);   \
  } while (0)

// After every kernel launch: CUDA_CHECK_LAUNCH("rmsnorm_forward").
#define CUDA_CHECK_LAUNCH(kernel) ::bb::cuda::check_launch(kernel, __FILE__, __LINE__)
