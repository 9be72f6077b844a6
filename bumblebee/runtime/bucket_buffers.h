// BucketBuffers: the memory that export_weights' buckets are handed out in,
// two buffers taken in turn, each reused only once nothing views it.
//
// A bucket's tensors are views into one buffer (no copy per tensor), and the
// caller may keep any of them as long as it likes: a buffer is reused for a
// later bucket only when no tensor (and so no numpy array or DLPack capsule
// made from one) still holds it; otherwise a fresh buffer takes its place and
// the old one is freed with its last view. A caller that drops each bucket
// before asking for the one after next so holds two buffers at most.
#pragma once

#include <memory>

#include "bumblebee/core/tensor.h"

namespace bb {

// One block of bucket memory: pinned host memory, plain host memory, or device memory.
class BucketBuffer {
 public:
  BucketBuffer(size_t nbytes, Device dev, bool pinned);
  ~BucketBuffer();
  BucketBuffer(const BucketBuffer&) = delete;
  BucketBuffer& operator=(const BucketBuffer&) = delete;

  char* data() const { return static_cast<char*>(block_.raw()); }
  size_t nbytes() const { return block_.nbytes(); }
  Device device() const { return block_.device(); }
  // The first `n` bytes as a uint8 tensor over the block's own storage (so a
  // HostCopyStream sees that it is pinned); it does not keep the buffer alive.
  Tensor bytes(size_t n) const { return block_.flat_slice(0, {int64_t(n)}); }

 private:
  Tensor block_;   // uint8 [nbytes]
};

// A tensor over `buffer` from byte `offset`; it keeps the buffer alive.
Tensor bucket_view(const std::shared_ptr<BucketBuffer>& buffer, size_t offset, const Shape& shape, DType dtype);

class BucketBuffers {
 public:
  // Buffers on `dev`; host buffers are pinned when `compute` (the runtime's
  // device) is a GPU, so one copy moves a bucket at the full host link speed.
  BucketBuffers(Device dev, Device compute);

  // The next buffer in turn with room for `nbytes`: the one handed out two
  // calls ago when nothing views it and it is large enough, else a fresh one.
  // On a GPU runtime a reused buffer is handed back only after the device is
  // idle: a caller's stream (torch's) may still have been reading it when its
  // last view was dropped.
  std::shared_ptr<BucketBuffer> next(size_t nbytes);

 private:
  Device dev_, compute_;
  std::shared_ptr<BucketBuffer> slots_[2];
  int turn_ = 0;
};

}  // namespace bb
