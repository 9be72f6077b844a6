// TensorBox: a rectangular block of a tensor (an offset and an extent per
// dimension), the unit a distributed checkpoint stores. A rank's part of a
// tensor-parallel shard that the distributed optimizer splits further over
// dp is a contiguous range of the shard's row-major elements;
// flat_range_boxes cuts such a range into the few boxes whose elements are
// contiguous in that order (a partial first row, whole rows, a partial last
// row, recursively), so every saved piece is a box and its bytes are one
// contiguous run of the rank's buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"

namespace bb {

struct TensorBox {
  Shape offsets;   // first index per dimension
  Shape extent;    // length per dimension
  int64_t numel() const { return shape_numel(extent); }
  bool operator==(const TensorBox&) const = default;
};

std::string box_str(const TensorBox& b);   // "[o0:o0+e0, o1:o1+e1]"

// The boxes, in row-major order, of elements [begin, end) of a row-major
// tensor of `shape`; offsets relative to that tensor.
std::vector<TensorBox> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end);

// The common part of two boxes of one tensor; extent all zero when they do not meet.
TensorBox box_intersection(const TensorBox& a, const TensorBox& b);

// Copies `region` (a box of the global tensor inside both `src_box` and
// `dst_box`) from `src`, which holds src_box's elements row-major, to `dst`,
// which holds dst_box's; `elem` bytes per element. The innermost run is one memcpy.
void copy_box_region(const void* src, const TensorBox& src_box, void* dst, const TensorBox& dst_box,
                     const TensorBox& region, size_t elem);

}  // namespace bb
