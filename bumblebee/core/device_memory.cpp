// Host side of device memory, and the dispatch to the CUDA backend's pool.
#include "bumblebee/core/device_memory.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "bumblebee/core/error.h"

#ifdef BB_WITH_CUDA
#include "bumblebee/core/cuda/cuda_memory.h"
#endif

namespace bb {
namespace {
std::atomic<size_t> g_host_in_use{0};
std::atomic<size_t> g_host_peak{0};

void note_host_alloc(size_t n) {
  size_t now = g_host_in_use += n;
  size_t peak = g_host_peak.load();
  while (now > peak && !g_host_peak.compare_exchange_weak(peak, now)) {}
}

[[maybe_unused]] [[noreturn]] void no_cuda() {
  BB_FAIL("CUDA was requested but this Bumblebee build has no CUDA backend "
          "(configure found no CUDA toolkit); rebuild on a machine with /usr/local/cuda or use device=cpu");
}
}  // namespace

bool cuda_built() {
#ifdef BB_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef BB_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

void* device_alloc(size_t nbytes, Device dev) {
  if (dev.is_cpu()) {
    size_t n = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n == 0 ? 64 : n);
    BB_CHECK(p, "out of host memory allocating ", nbytes, " bytes (", g_host_in_use.load(), " bytes in use)");
    note_host_alloc(nbytes);
    return p;
  }
#ifdef BB_WITH_CUDA
  return cuda::pool_alloc(nbytes, dev.index);
#else
  no_cuda();
#endif
}

void device_free(void* ptr, size_t nbytes, Device dev) {
  if (!ptr) return;
  if (dev.is_cpu()) {
    std::free(ptr);
    g_host_in_use -= nbytes;
    return;
  }
#ifdef BB_WITH_CUDA
  cuda::pool_free(ptr, nbytes, dev.index);
#else
  no_cuda();
#endif
}

void* host_pinned_alloc(size_t nbytes) {
#ifdef BB_WITH_CUDA
  if (cuda::device_count() > 0) {
    void* p = cuda::pinned_alloc(nbytes);
    note_host_alloc(nbytes);
    return p;
  }
#endif
  return device_alloc(nbytes, Device::cpu());
}

void host_pinned_free(void* ptr, size_t nbytes) {
  if (!ptr) return;
#ifdef BB_WITH_CUDA
  if (cuda::device_count() > 0) {
    cuda::pinned_free(ptr, nbytes);
    g_host_in_use -= nbytes;
    return;
  }
#endif
  device_free(ptr, nbytes, Device::cpu());
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#ifdef BB_WITH_CUDA
  cuda::copy(dst, dst_dev.is_cuda(), src, src_dev.is_cuda(), nbytes, dst_dev.is_cuda() ? dst_dev.index : src_dev.index);
#else
  no_cuda();
#endif
}

void device_memset_zero(void* ptr, size_t nbytes, Device dev) {
  if (nbytes == 0) return;
  if (dev.is_cpu()) {
    std::memset(ptr, 0, nbytes);
    return;
  }
#ifdef BB_WITH_CUDA
  cuda::memset_zero(ptr, nbytes, dev.index);
#else
  no_cuda();
#endif
}

size_t device_bytes_in_use(Device dev) {
  if (dev.is_cpu()) return g_host_in_use.load();
#ifdef BB_WITH_CUDA
  return cuda::pool_bytes_in_use(dev.index);
#else
  return 0;
#endif
}

size_t device_peak_bytes(Device dev) {
  if (dev.is_cpu()) return g_host_peak.load();
#ifdef BB_WITH_CUDA
  return cuda::pool_peak_bytes(dev.index);
#else
  return 0;
#endif
}

void device_reset_peak(Device dev) {
  if (dev.is_cpu()) {
    g_host_peak = g_host_in_use.load();
    return;
  }
#ifdef BB_WITH_CUDA
  cuda::pool_reset_peak(dev.index);
#endif
}

void device_release_cached(Device dev) {
  if (dev.is_cpu()) return;
#ifdef BB_WITH_CUDA
  cuda::pool_release_unused(dev.index);
#else
  no_cuda();
#endif
}

DeviceMemoryInfo device_memory_info(Device dev) {
  DeviceMemoryInfo info;
  if (dev.is_cpu()) return info;
#ifdef BB_WITH_CUDA
  cuda::memory_info(dev.index, &info.free_bytes, &info.total_bytes);
  return info;
#else
  no_cuda();
#endif
}

std::string device_pci_bus_id(Device dev) {
  if (dev.is_cpu()) return "";
#ifdef BB_WITH_CUDA
  return cuda::pci_bus_id(dev.index);
#else
  no_cuda();
#endif
}

void device_synchronize(Device dev) {
  if (dev.is_cpu()) return;
#ifdef BB_WITH_CUDA
  cuda::synchronize(dev.index);
#else
  no_cuda();
#endif
}

void device_make_current(Device dev) {
  if (dev.is_cpu()) return;
#ifdef BB_WITH_CUDA
  cuda::set_device(dev.index);
#else
  no_cuda();
#endif
}

}  // namespace bb
