// BucketBuffers: export_weights' double-buffered bucket memory (bucket_buffers.h).
#include "bumblebee/runtime/bucket_buffers.h"

#include <exception>

#include "bumblebee/core/device_memory.h"

namespace bb {

BucketBuffer::BucketBuffer(size_t nbytes, Device dev, bool pinned)
    : data_(static_cast<char*>(pinned ? host_pinned_alloc(nbytes) : device_alloc(nbytes, dev))),
      nbytes_(nbytes),
      device_(dev),
      pinned_(pinned) {}

BucketBuffer::~BucketBuffer() {
  // The last view can go while a caller's stream still reads the buffer (a
  // DLPack tensor's deleter runs when torch drops it, not when its kernels
  // end). A destructor must not throw: at process exit the CUDA runtime may
  // already be unloaded, and the memory goes with it.
  if (device_.is_cuda()) {
    try {
      device_synchronize(device_);
    } catch (const std::exception&) {
      return;
    }
  }
  if (pinned_)
    host_pinned_free(data_, nbytes_);
  else
    device_free(data_, nbytes_, device_);
}

Tensor bucket_view(const std::shared_ptr<BucketBuffer>& buffer, size_t offset, const Shape& shape, DType dtype) {
  const size_t n = size_t(shape_numel(shape)) * dtype_size(dtype);
  BB_CHECK(offset + n <= buffer->nbytes(), "bucket_view: ", n, " bytes at offset ", offset, " overrun a bucket of ",
           buffer->nbytes(), " bytes");
  return Tensor::wrap(buffer->data() + offset, shape, dtype, buffer->device(), buffer);
}

BucketBuffers::BucketBuffers(Device dev, Device compute) : dev_(dev), compute_(compute) {}

std::shared_ptr<BucketBuffer> BucketBuffers::next(size_t nbytes) {
  std::shared_ptr<BucketBuffer>& slot = slots_[turn_];
  turn_ = 1 - turn_;
  if (slot && slot.use_count() == 1 && slot->nbytes() >= nbytes) {
    if (compute_.is_cuda()) device_synchronize(compute_);
    return slot;
  }
  // Free a buffer no one views before taking the new one, so the bound stays two.
  slot.reset();
  slot = std::make_shared<BucketBuffer>(nbytes, dev_, dev_.is_cpu() && compute_.is_cuda());
  return slot;
}

}  // namespace bb
