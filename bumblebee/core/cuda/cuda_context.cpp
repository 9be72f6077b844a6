// Per-device streams, cuBLASLt handles and workspaces; CUDA error reporting.
#include "bumblebee/core/cuda/cuda_context.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "bumblebee/core/error.h"

namespace bb::cuda {
namespace {

// Hopper's cuBLASLt kernels want up to 32 MiB of workspace for the fastest
// algorithms on large GEMMs.
constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;
constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaStream_t own_stream = nullptr;
  cudaStream_t stream = nullptr;  // current: own_stream unless set_current_stream changed it
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;
  cudaDeviceProp props{};
};

DeviceState g_devices[kMaxDevices];

DeviceState& state_of_current_device() {
  int dev = current_device();
  BB_CHECK(dev >= 0 && dev < kMaxDevices, "CUDA device index ", dev, " is beyond the backend's limit of ",
           kMaxDevices, " devices");
  DeviceState& s = g_devices[dev];
  std::call_once(s.once, [&] {
    CUDA_CHECK(cudaGetDeviceProperties(&s.props, dev));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s.own_stream, cudaStreamDefault));
    s.stream = s.own_stream;
    CUBLAS_CHECK(cublasLtCreate(&s.cublaslt));
    // The workspace lives as long as the process, so it bypasses the pool.
    CUDA_CHECK(cudaMalloc(&s.workspace, kCublasLtWorkspaceBytes));
  });
  return s;
}

bool sync_check_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("BB_CUDA_SYNC_CHECK");
    return v && std::strcmp(v, "0") != 0 && std::strcmp(v, "") != 0;
  }();
  return enabled;
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  detail::throw_error(file, line,
                      detail::concat("CUDA call ", call, " failed: ", cudaGetErrorName(err), " (",
                                     cudaGetErrorString(err), ")"));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  detail::throw_error(file, line,
                      detail::concat("cuBLASLt call ", call, " failed with status ", int(status), " (",
                                     cublasLtGetStatusString(status), ")"));
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    detail::throw_error(file, line,
                        detail::concat("CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorName(err), " (",
                                       cudaGetErrorString(err), ")"));
  if (sync_check_enabled()) {
    err = cudaStreamSynchronize(current_stream());
    if (err != cudaSuccess)
      detail::throw_error(file, line,
                          detail::concat("CUDA kernel ", kernel, " failed while running: ", cudaGetErrorName(err),
                                         " (", cudaGetErrorString(err), ")"));
  }
}

int current_device() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

cudaStream_t current_stream() { return state_of_current_device().stream; }

void set_current_stream(cudaStream_t stream) {
  DeviceState& s = state_of_current_device();
  s.stream = stream ? stream : s.own_stream;
}

cublasLtHandle_t cublaslt_handle() { return state_of_current_device().cublaslt; }

void* cublaslt_workspace() { return state_of_current_device().workspace; }

size_t cublaslt_workspace_bytes() { return kCublasLtWorkspaceBytes; }

const cudaDeviceProp& device_properties() { return state_of_current_device().props; }

DeviceGuard::DeviceGuard(int device) {
  int now = current_device();
  if (now != device) {
    CUDA_CHECK(cudaSetDevice(device));
    previous_ = now;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; a failure here would already have failed
  // the cudaSetDevice in the constructor.
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace bb::cuda
