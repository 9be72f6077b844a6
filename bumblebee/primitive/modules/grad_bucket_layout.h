// Gradient buckets: how the flat buffers are cut for the data-parallel
// reduce-scatter that overlaps backward.
//
// Backward finishes parameters in reverse registration order, so buckets are
// filled from the last registered parameter backwards: bucket 0 holds the
// parameters registered last and lies at the end of the flat buffers. A
// bucket closes at a parameter boundary once it holds at least `bucket_size`
// elements, never inside a run of parameters kept together (the operands of
// one fused GEMM), and is padded at its end to a multiple of dp, so that
// every dp rank owns the same slice index of every bucket. With dp = 1 there
// is no padding and the offsets are those of a plain concatenation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bb {

struct GradBucket {
  int64_t begin = 0, end = 0;                // [begin, end) in the flat buffers, padding included
  size_t first_param = 0, end_param = 0;     // parameters [first_param, end_param) in registration order
  int64_t numel() const { return end - begin; }
};

struct GradBucketLayout {
  std::vector<GradBucket> buckets;   // in the order backward completes them
  std::vector<int64_t> offsets;      // each parameter's offset in the flat buffers
  int64_t total = 0;                 // flat buffer length, padding included
};

// numels[i]: elements of parameter i in registration order. joined_to_next[i]:
// parameters i and i+1 must stay adjacent (same size as numels). bucket_size
// <= 0 makes one bucket.
GradBucketLayout plan_grad_buckets(const std::vector<int64_t>& numels, const std::vector<bool>& joined_to_next,
                                   int64_t dp, int64_t bucket_size);

}  // namespace bb
