// Runtime::export_weights in buckets: the streaming HF export (hf_export.cpp)
// cast to the requested dtype on the host and grouped into buckets of bounded
// size, the unit an RL trainer hands to its inference engine.
#include "bumblebee/runtime/runtime.h"

#include <optional>

namespace bb {

void Runtime::export_weights(ModelHandle& h, const WeightBucketSink& sink, const ExportOptions& opts) {
  const std::optional<DType> dtype = opts.dtype.empty() ? std::nullopt : std::optional<DType>(dtype_from_name(opts.dtype));
  const uint64_t limit = opts.bucket_bytes ? opts.bucket_bytes : cfg_.export_cfg.bucket_bytes;
  const bool receives = !opts.rank0_only || parallel_->world_rank() == 0;
  WeightBucket bucket;
  uint64_t bytes = 0;
  export_weights(h, [&](const std::string& name, const Tensor& full) {
    if (!receives) return;
    Tensor host = full.to(Device::cpu());
    if (dtype) host = host.to(*dtype);
    if (host.raw() == full.raw()) host = host.clone();   // the bucket owns its data, not a view of a parameter
    if (!bucket.empty() && bytes + host.nbytes() > limit) {
      sink(bucket);
      bucket.clear();
      bytes = 0;
    }
    bytes += host.nbytes();
    bucket.emplace_back(name, std::move(host));
  });
  if (!bucket.empty()) sink(bucket);
}

}  // namespace bb
