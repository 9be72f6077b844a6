// Runtime::export_weights in buckets: the streaming HF export (hf_export.cpp)
// cast to the requested dtype where the tensors live and packed into buckets
// of bounded size, the unit an RL trainer hands to its inference engine.
//
// Where the time went before (Qwen3-1.7B, bf16, one H200: 1.47 GB/s; read
// from the code, not profiled): each tensor was copied to the host on its
// own, synchronously, into freshly allocated pageable memory (the driver
// stages pageable copies through a bounce buffer, and every export touched
// 3.4 GB of new pages; the tied embedding was cloned once more on the host),
// the export held the GIL so the caller could not work meanwhile, and the
// caller's copy to a GPU tensor went from pageable memory again. Now a bucket
// is gathered on the device with device-to-device copies and crosses the
// host link once, on a copy stream, into pinned memory that the next export
// reuses; a device target never leaves the GPU. Python's generator
// (bumblebee/runtime.py) gathers the next bucket while the caller works on
// the current one.
#include <algorithm>
#include <optional>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/host_copy_stream.h"
#include "bumblebee/runtime/bucket_buffers.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {

namespace {

// Each tensor starts at a multiple of this in its bucket: aligned for every
// dtype and for the vectorised loads of whoever reads it through DLPack.
constexpr size_t kTensorAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

struct BucketEntry {
  std::string name;
  Shape shape;
  DType dtype;
  size_t offset = 0;
};

}  // namespace

void Runtime::export_weights(ModelHandle& h, const WeightBucketSink& sink, const ExportOptions& opts) {
  const std::optional<DType> dtype = opts.dtype.empty() ? std::nullopt : std::optional<DType>(dtype_from_name(opts.dtype));
  const uint64_t limit = opts.bucket_bytes ? opts.bucket_bytes : cfg_.export_cfg.bucket_bytes;
  const bool receives = !opts.rank0_only || parallel_->world_rank() == 0;
  const bool to_device = opts.target == ExportTarget::Device;
  BB_CHECK(!to_device || device_.is_cuda(), "export_weights: the device target needs a GPU runtime (backend.device=cuda); ",
           "this runtime runs on ", device_.str());
  // A host bucket on a GPU runtime is staged on the device and crosses the
  // host link in one copy; otherwise the tensors go straight into the bucket.
  const bool staged = device_.is_cuda() && !to_device;
  std::optional<BucketBuffers> device_buffers;   // from the stream-ordered pool, cheap to take again
  if (to_device) device_buffers.emplace(device_, device_);
  if (!to_device && !host_export_buffers_) host_export_buffers_ = std::make_shared<BucketBuffers>(Device::cpu(), device_);
  BucketBuffers& buffers = to_device ? *device_buffers : *host_export_buffers_;
  std::shared_ptr<BucketBuffer> staging;   // staged: the device bucket, kept for the whole export
  // The download runs on a non-blocking stream of its own: on the compute
  // stream (a blocking one) it would take turns with whatever the caller
  // queues on the legacy default stream, such as torch's copies of the last
  // bucket up to the GPU.
  std::optional<HostCopyStream> download;
  if (staged) download.emplace(device_);
  std::shared_ptr<BucketBuffer> gather;    // where the current bucket's tensors are copied as they come
  std::vector<BucketEntry> entries;
  size_t bytes = 0;
  auto flush = [&] {
    std::shared_ptr<BucketBuffer> out = gather;
    if (staged) {
      out = buffers.next(std::max<size_t>(limit, bytes));
      download->wait_for_compute();   // the bucket's gathers
      download->copy(out->bytes(bytes), staging->bytes(bytes));
      // Done before the sink sees it, and before the next gathers overwrite the staging bucket.
      download->synchronize();
    } else if (device_.is_cuda()) {
      // A device bucket is complete before any stream of the caller reads it.
      device_synchronize(device_);
    }
    WeightBucket bucket;
    for (const BucketEntry& e : entries) bucket.emplace_back(e.name, bucket_view(out, e.offset, e.shape, e.dtype));
    entries.clear();
    bytes = 0;
    gather.reset();
    out.reset();
    sink(bucket);
  };
  export_weights(h, [&](const std::string& name, const Tensor& full) {
    if (!receives) return;
    const Tensor t = dtype ? full.to(*dtype) : full;   // on the device for a GPU runtime
    const size_t n = t.nbytes();
    size_t at = aligned(bytes);
    if (!entries.empty() && at + n > limit) {
      flush();
      at = 0;
    }
    if (!gather) {
      const size_t capacity = std::max<size_t>(limit, n);
      if (!staged) {
        gather = buffers.next(capacity);
      } else {
        // The device bucket grows only for a tensor larger than bucket_bytes, which comes alone.
        if (!staging || staging->nbytes() < capacity) {
          staging.reset();
          staging = std::make_shared<BucketBuffer>(capacity, device_, false);
        }
        gather = staging;
      }
    }
    if (n) device_copy(gather->data() + at, gather->device(), t.raw(), t.device(), n);
    entries.push_back({name, t.shape(), t.dtype(), at});
    bytes = at + n;
  });
  if (!entries.empty()) flush();
}

}  // namespace bb
