// BucketBuffers: export_weights' double-buffered bucket memory (bucket_buffers.h).
#include "bumblebee/runtime/bucket_buffers.h"

#include <exception>

#include "bumblebee/core/device_memory.h"

namespace bb {

BucketBuffer::BucketBuffer(size_t nbytes, Device dev, bool pinned)
    : block_(Tensor::empty({int64_t(nbytes)}, DType::U8, dev)) {
  // Storage pins memory only by moving its bytes (offload's path), here once
  // per buffer: an export keeps its host buffers for the next one.
  if (pinned) block_.storage()->relocate(Device::cpu(), true);
}

BucketBuffer::~BucketBuffer() {
  // The last view can go while a caller's stream still reads the buffer (a
  // DLPack tensor's deleter runs when torch drops it, not when its kernels
  // end). A destructor must not throw: at process exit the CUDA runtime may
  // already be unloaded, and then the freeing below is a no-op too.
  if (!device().is_cuda()) return;
  try {
    device_synchronize(device());
  } catch (const std::exception&) {
  }
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
