// CUDA device memory: the stream-ordered pool per device, its accounting,
// copies, zero fills and dtype casts.
//
// Each device gets its own cudaMemPool whose release threshold is unlimited,
// so memory freed at the end of one step stays in the pool and the next step
// allocates with no cudaMalloc and no synchronisation. Allocation and free are
// ordered on the backend's current stream, which is what makes freeing a
// tensor right after launching the last kernel that reads it safe.
#include "bumblebee/core/cuda/cuda_memory.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "bumblebee/core/cuda/device_convert.cuh"
#include "bumblebee/core/error.h"

namespace bb::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Pool {
  std::once_flag once;
  cudaMemPool_t pool = nullptr;
  std::atomic<size_t> in_use{0};
  std::atomic<size_t> peak{0};
};

Pool g_pools[kMaxDevices];

Pool& pool_of(int device) {
  BB_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  Pool& p = g_pools[device];
  // Runs until it succeeds once: a throw leaves the pool uncreated.
  std::call_once(p.once, [&] {
    const int count = device_count();
    BB_CHECK(device < count, "cuda:", device, " was requested but ",
             count == 0 ? std::string("no CUDA device is visible (no GPU or no driver)")
                        : detail::concat("only ", count, " CUDA device(s) are visible"));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    CUDA_CHECK(cudaMemPoolCreate(&p.pool, &props));
    uint64_t keep_everything = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  });
  return p;
}

void note_alloc(Pool& p, size_t n) {
  size_t now = p.in_use += n;
  size_t peak = p.peak.load();
  while (now > peak && !p.peak.compare_exchange_weak(peak, now)) {}
}

// ---- casts ---------------------------------------------------------------------------
// Float to narrow float goes through float, as the host cast does, so host and
// device casts of the same values agree bit for bit.
template <typename S, typename D>
__device__ __forceinline__ D convert(S s) {
  if constexpr (std::is_same_v<D, bf16> || std::is_same_v<D, __half>) {
    return from_float<D>(to_float(s));
  } else if constexpr (std::is_same_v<S, bf16> || std::is_same_v<S, __half>) {
    return D(to_float(s));
  } else {
    return D(s);
  }
}

template <typename S, typename D>
__global__ void cast_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = convert<S, D>(src[i]);
}

template <typename F>
void dispatch_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::F64: f(double{}); return;
    case DType::F32: f(float{}); return;
    case DType::BF16: f(bf16{}); return;
    case DType::F16: f(__half{}); return;
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::U8: f(uint8_t{}); return;
  }
  BB_FAIL("cast: unknown dtype code ", int(dt));
}

}  // namespace

int device_count() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // no driver or no device is an answer (0), not a failure
    return 0;
  }
  return n;
}

void* pool_alloc(size_t nbytes, int device) {
  if (nbytes == 0) return nullptr;
  Pool& p = pool_of(device);
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream();
  void* ptr = nullptr;
  cudaError_t err = cudaMallocFromPoolAsync(&ptr, nbytes, p.pool, stream);
  if (err == cudaErrorMemoryAllocation) {
    // The pool may hold enough memory in pieces that do not fit: give back
    // what is unused once the stream has drained, then try once more.
    cudaGetLastError();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
    err = cudaMallocFromPoolAsync(&ptr, nbytes, p.pool, stream);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    BB_FAIL("CUDA out of memory allocating ", nbytes, " bytes on cuda:", device, " (", p.in_use.load(),
            " bytes in use by tensors, ", free_b, " bytes free of ", total_b, " total on the device)");
  }
  CUDA_CHECK(err);
  note_alloc(p, nbytes);
  return ptr;
}

void pool_free(void* ptr, size_t nbytes, int device) {
  if (!ptr || device < 0 || device >= kMaxDevices) return;
  Pool& p = g_pools[device];
  p.in_use -= nbytes;
  // Called from destructors, so it reports instead of throwing. At process
  // exit the runtime may already be unloaded; the memory goes with it.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != device && cudaSetDevice(device) != cudaSuccess) return;
  cudaError_t err = cudaFreeAsync(ptr, current_stream());
  if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
    std::fprintf(stderr, "bumblebee: cudaFreeAsync of %zu bytes on cuda:%d failed: %s\n", nbytes, device,
                 cudaGetErrorString(err));
  }
  if (previous != device) cudaSetDevice(previous);
}

size_t pool_bytes_in_use(int device) {
  BB_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  return g_pools[device].in_use.load();
}

size_t pool_peak_bytes(int device) {
  BB_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  return g_pools[device].peak.load();
}

void pool_reset_peak(int device) {
  BB_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  g_pools[device].peak = g_pools[device].in_use.load();
}

void pool_release_unused(int device) {
  Pool& p = pool_of(device);
  DeviceGuard guard(device);
  CUDA_CHECK(cudaDeviceSynchronize());   // frees ordered on the stream have happened
  CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
}

void memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

std::string pci_bus_id(int device) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, int(sizeof(id)), device));
  return id;
}

void* pinned_alloc(size_t nbytes) {
  void* ptr = nullptr;
  const cudaError_t err = cudaMallocHost(&ptr, nbytes == 0 ? 1 : nbytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    BB_FAIL("out of pinned host memory allocating ", nbytes, " bytes (cudaMallocHost)");
  }
  CUDA_CHECK(err);
  return ptr;
}

void pinned_free(void* ptr, size_t nbytes) {
  // Called from destructors, so it reports instead of throwing.
  const cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess && err != cudaErrorCudartUnloading)
    std::fprintf(stderr, "bumblebee: cudaFreeHost of %zu bytes failed: %s\n", nbytes, cudaGetErrorString(err));
}

void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  // Host memory is pageable and may be reused by the caller as soon as we
  // return, so a copy that touches the host completes before returning.
  if (!dst_on_device || !src_on_device) CUDA_CHECK(cudaStreamSynchronize(stream));
}

void memset_zero(void* ptr, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, current_stream()));
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, int device) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    copy(dst, true, src, true, size_t(n) * dtype_size(src_dtype), device);
    return;
  }
  DeviceGuard guard(device);
  const int threads = 256;
  const int blocks = grid_for(n, threads);
  cudaStream_t stream = current_stream();
  dispatch_storage(src_dtype, [&](auto s_tag) {
    using S = decltype(s_tag);
    dispatch_storage(dst_dtype, [&](auto d_tag) {
      using D = decltype(d_tag);
      cast_kernel<S, D><<<blocks, threads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  CUDA_CHECK_LAUNCH("cast");
}

void synchronize(int device) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void set_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace bb::cuda
