// HostCopyStream: the host path, and the dispatch to the CUDA stream.
#include "bumblebee/core/host_copy_stream.h"

#ifdef BB_WITH_CUDA
#include "bumblebee/core/cuda/copy_stream.h"
#endif

namespace bb {

HostCopyStream::HostCopyStream(Device dev) : dev_(dev) {
  if (dev.is_cpu()) return;
#ifdef BB_WITH_CUDA
  stream_ = cuda::copy_stream_create(dev.index);
#else
  BB_FAIL("HostCopyStream on ", dev.str(), ": this Bumblebee build has no CUDA backend");
#endif
}

HostCopyStream::~HostCopyStream() {
#ifdef BB_WITH_CUDA
  if (stream_) cuda::copy_stream_destroy(stream_);
#endif
}

void HostCopyStream::wait_for_compute() {
#ifdef BB_WITH_CUDA
  if (stream_) cuda::copy_stream_wait_for_compute(stream_);
#endif
}

void HostCopyStream::copy(Tensor dst, const Tensor& src) {
  BB_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "HostCopyStream::copy: ",
           dtype_name(src.dtype()), shape_str(src.shape()), " into ", dtype_name(dst.dtype()), shape_str(dst.shape()));
  if (!stream_) {
    dst.copy_from(src);
    return;
  }
#ifdef BB_WITH_CUDA
  const bool dst_host = dst.device().is_cpu(), src_host = src.device().is_cpu();
  BB_CHECK(dst_host != src_host, "HostCopyStream::copy: one side must be on the host, got ", src.device().str(),
           " into ", dst.device().str());
  const Tensor& host = dst_host ? dst : src;
  BB_CHECK(host.storage()->pinned_host(), "HostCopyStream::copy: the host side must be pinned memory, or the copy ",
           "would not overlap");
  cuda::copy_stream_copy(stream_, dst.raw(), src.raw(), dst.nbytes());
#endif
}

void HostCopyStream::synchronize() {
#ifdef BB_WITH_CUDA
  if (stream_) cuda::copy_stream_synchronize(stream_);
#endif
}

void HostCopyStream::compute_waits() {
#ifdef BB_WITH_CUDA
  if (stream_) cuda::copy_stream_compute_waits(stream_);
#endif
}

}  // namespace bb
