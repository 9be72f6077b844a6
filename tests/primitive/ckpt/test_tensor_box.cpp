// Tests of the box geometry of sharded checkpoints: a flat range cut into
// boxes covers exactly its elements in order, intersections, and the copy of
// a region between two boxes' row-major buffers.
#include "bumblebee/primitive/ckpt/tensor_box.h"

#include <gtest/gtest.h>

#include <numeric>

namespace bb {
namespace {

// The row-major indices of a box's elements inside a tensor of `shape`.
std::vector<int64_t> indices_of(const Shape& shape, const TensorBox& b) {
  std::vector<int64_t> out;
  Shape at = b.offsets;
  const int64_t n = b.numel();
  for (int64_t k = 0; k < n; ++k) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + at[d];
    out.push_back(flat);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++at[d] < b.offsets[d] + b.extent[d]) break;
      at[d] = b.offsets[d];
    }
  }
  return out;
}

TEST(TensorBox, FlatRangesBecomeBoxesCoveringExactlyTheirElementsInOrder) {
  for (const Shape& shape : {Shape{7}, Shape{5, 6}, Shape{3, 4, 5}, Shape{2, 3, 1, 4}})
    for (int64_t begin = 0; begin <= shape_numel(shape); ++begin)
      for (int64_t end = begin; end <= shape_numel(shape); ++end) {
        std::vector<int64_t> got;
        const std::vector<TensorBox> boxes = flat_range_boxes(shape, begin, end);
        for (const TensorBox& b : boxes) {
          const std::vector<int64_t> idx = indices_of(shape, b);
          got.insert(got.end(), idx.begin(), idx.end());
        }
        std::vector<int64_t> want(size_t(end - begin));
        std::iota(want.begin(), want.end(), begin);
        ASSERT_EQ(got, want) << shape_str(shape) << " [" << begin << ", " << end << ")";
        // A partial first row, whole rows, a partial last row, per dimension.
        EXPECT_LE(boxes.size(), 2 * shape.size() + 1) << shape_str(shape);
      }
}

TEST(TensorBox, WholeRowsAreOneBox) {
  const std::vector<TensorBox> b = flat_range_boxes({6, 4}, 8, 20);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], (TensorBox{{2, 0}, {3, 4}}));
  EXPECT_EQ(flat_range_boxes({6, 4}, 6, 14).size(), 3u);
}

TEST(TensorBox, IntersectionAndRegionCopy) {
  const TensorBox a{{0, 2}, {4, 3}}, b{{2, 0}, {3, 4}};
  EXPECT_EQ(box_intersection(a, b), (TensorBox{{2, 2}, {2, 2}}));
  EXPECT_EQ(box_intersection(a, TensorBox{{0, 5}, {4, 1}}).numel(), 0);
  // Source holds a's elements, value = 10 * row + col; copy the common part into b's buffer.
  std::vector<double> src(12), dst(12, -1.0);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c) src[size_t(r * 3 + c)] = double(10 * r + (c + 2));
  copy_box_region(src.data(), a, dst.data(), b, box_intersection(a, b), sizeof(double));
  // b is rows 2..4, cols 0..3: its (2,2), (2,3), (3,2), (3,3) are filled.
  EXPECT_EQ(dst[2], 22.0);
  EXPECT_EQ(dst[3], 23.0);
  EXPECT_EQ(dst[6], 32.0);
  EXPECT_EQ(dst[7], 33.0);
  EXPECT_EQ(dst[0], -1.0);
  EXPECT_EQ(dst[8], -1.0);
}

TEST(TensorBox, RangesOutsideTheTensorAreErrors) {
  EXPECT_THROW(flat_range_boxes({2, 2}, 3, 5), Error);
  EXPECT_THROW(flat_range_boxes({2, 2}, 2, 1), Error);
}

}  // namespace
}  // namespace bb
