// Gradient bucket planning.
#include "bumblebee/primitive/modules/grad_bucket_layout.h"

#include "bumblebee/core/error.h"

namespace bb {

GradBucketLayout plan_grad_buckets(const std::vector<int64_t>& numels, const std::vector<bool>& joined_to_next,
                                   int64_t dp, int64_t bucket_size) {
  BB_CHECK(dp >= 1, "gradient buckets need dp >= 1, got ", dp);
  BB_CHECK(joined_to_next.size() == numels.size(), "gradient buckets: ", joined_to_next.size(),
           " adjacency flags for ", numels.size(), " parameters");
  GradBucketLayout layout;
  layout.offsets.assign(numels.size(), 0);
  // Which parameters form each bucket, walking backwards from the last one.
  size_t end = numels.size();
  int64_t filled = 0;
  for (size_t i = numels.size(); i-- > 0;) {
    filled += numels[i];
    const bool may_cut_before = i > 0 && !joined_to_next[i - 1];
    if (bucket_size > 0 && filled >= bucket_size && may_cut_before) {
      layout.buckets.push_back({0, 0, i, end});
      end = i;
      filled = 0;
    }
  }
  if (end > 0) layout.buckets.push_back({0, 0, 0, end});
  // Offsets ascend with registration, so place the buckets from the last one (the first parameters) on.
  int64_t pos = 0;
  for (auto b = layout.buckets.rbegin(); b != layout.buckets.rend(); ++b) {
    b->begin = pos;
    for (size_t i = b->first_param; i < b->end_param; ++i) {
      layout.offsets[i] = pos;
      pos += numels[i];
    }
    pos = (pos + dp - 1) / dp * dp;
    b->end = pos;
  }
  layout.total = pos;
  return layout;
}

}  // namespace bb
