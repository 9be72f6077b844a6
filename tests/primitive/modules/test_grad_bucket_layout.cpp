// Gradient bucket layout: reverse registration order, whole parameters,
// padding to dp, fused runs kept together, and the offsets ParamStore binds.
#include <gtest/gtest.h>

#include "bumblebee/primitive/modules/grad_bucket_layout.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {
namespace {

TEST(GradBucketLayout, FillsFromTheLastParameterAndPadsEachBucketToDp) {
  // Parameters of 5, 3, 4, 6 and 2 elements; buckets of at least 6, dp 4.
  const GradBucketLayout l = plan_grad_buckets({5, 3, 4, 6, 2}, std::vector<bool>(5, false), 4, 6);
  ASSERT_EQ(l.buckets.size(), 3u);
  // Backward order: {p3, p4} (8 elements), then {p1, p2} (7), then {p0} (5).
  EXPECT_EQ(l.buckets[0].first_param, 3u);
  EXPECT_EQ(l.buckets[0].end_param, 5u);
  EXPECT_EQ(l.buckets[1].first_param, 1u);
  EXPECT_EQ(l.buckets[1].end_param, 3u);
  EXPECT_EQ(l.buckets[2].first_param, 0u);
  EXPECT_EQ(l.buckets[2].end_param, 1u);
  // In the buffer: p0 [0,5) pad to 8 | p1 [8,11) p2 [11,15) pad to 16 | p3 [16,22) p4 [22,24).
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 8, 11, 16, 22}));
  EXPECT_EQ(l.buckets[2].begin, 0);
  EXPECT_EQ(l.buckets[2].end, 8);
  EXPECT_EQ(l.buckets[1].begin, 8);
  EXPECT_EQ(l.buckets[1].end, 16);
  EXPECT_EQ(l.buckets[0].begin, 16);
  EXPECT_EQ(l.buckets[0].end, 24);
  EXPECT_EQ(l.total, 24);
  for (const GradBucket& b : l.buckets) EXPECT_EQ(b.numel() % 4, 0);
}

TEST(GradBucketLayout, OneBucketIsThePlainConcatenationPaddedAtTheEnd) {
  const GradBucketLayout l = plan_grad_buckets({5, 3, 4}, std::vector<bool>(3, false), 8, 0);
  ASSERT_EQ(l.buckets.size(), 1u);
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 5, 8}));
  EXPECT_EQ(l.buckets[0].begin, 0);
  EXPECT_EQ(l.buckets[0].end, 16);
  EXPECT_EQ(l.total, 16);
}

TEST(GradBucketLayout, DpOneNeverPadsWhateverTheBucketSize) {
  const GradBucketLayout l = plan_grad_buckets({5, 3, 4}, std::vector<bool>(3, false), 1, 1);
  ASSERT_EQ(l.buckets.size(), 3u);
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 5, 8}));
  EXPECT_EQ(l.total, 12);
}

TEST(GradBucketLayout, NeverCutsInsideAKeptTogetherRun) {
  // p1 and p2 are one fused operand: the cut that would fall between them moves before p1.
  const GradBucketLayout l = plan_grad_buckets({4, 4, 4, 4}, {false, true, false, false}, 2, 4);
  ASSERT_EQ(l.buckets.size(), 3u);
  EXPECT_EQ(l.buckets[0].first_param, 3u);
  EXPECT_EQ(l.buckets[1].first_param, 1u);
  EXPECT_EQ(l.buckets[1].end_param, 3u);
  EXPECT_EQ(l.buckets[2].first_param, 0u);
  EXPECT_EQ(l.offsets[2], l.offsets[1] + 4);
}

TEST(GradBucketLayout, ParamStoreBindsViewsAtTheBucketOffsets) {
  ParamStore store;
  store.add("a", {5}, {});
  Parameter& gate = store.add("gate", {2, 3}, {});
  Parameter& up = store.add("up", {2, 3}, {});
  store.add("b", {3}, {});
  store.keep_together(gate, up);
  store.allocate(DType::F64, DType::F64, Device::cpu(), 4, 3);
  // Backward order: {b} 3 -> pad 4; {gate, up} 12; {a} 5 -> pad 8.
  ASSERT_EQ(store.groups().size(), 1u);
  ParamGroup& group = *store.groups().front();
  ASSERT_EQ(group.grad_buckets().size(), 3u);
  EXPECT_EQ(store.get("a").offset, 0);
  EXPECT_EQ(gate.offset, 8);
  EXPECT_EQ(up.offset, 14);
  EXPECT_EQ(store.get("b").offset, 20);
  EXPECT_EQ(group.flat_grads().numel(), 24);
  EXPECT_EQ(store.numel(), 20);
  // The fused view still works across gate|up, and views alias the flat buffers.
  EXPECT_EQ(store.fused_grad(gate, up).shape(), (Shape{4, 3}));
  store.get("b").grad.fill_(2.0);
  EXPECT_EQ(group.flat_grads().to_doubles()[21], 2.0);
  EXPECT_EQ(group.flat_grads().to_doubles()[23], 0.0);
}

}  // namespace
}  // namespace bb
