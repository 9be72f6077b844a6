// Box geometry of distributed checkpoints: cutting flat ranges, intersecting, copying.
#include "bumblebee/primitive/ckpt/tensor_box.h"

#include <algorithm>
#include <cstring>

#include "bumblebee/core/error.h"

namespace bb {

std::string box_str(const TensorBox& b) {
  std::string s = "[";
  for (size_t d = 0; d < b.offsets.size(); ++d) {
    if (d) s += ", ";
    s += std::to_string(b.offsets[d]) + ":" + std::to_string(b.offsets[d] + b.extent[d]);
  }
  return s + "]";
}

namespace {
// Boxes of [begin, end) inside the trailing dims shape[dim..], prefixed by `lead`
// (offsets of the dims before `dim`, extent 1 each).
void cut(const Shape& shape, size_t dim, int64_t begin, int64_t end, const Shape& lead, std::vector<TensorBox>& out) {
  if (begin >= end) return;
  const Shape rest(shape.begin() + long(dim), shape.end());
  const int64_t inner = shape_numel(rest) / rest[0];
  auto emit = [&](int64_t row, int64_t rows) {
    TensorBox b{lead, Shape(lead.size(), 1)};
    b.offsets.push_back(row);
    b.extent.push_back(rows);
    for (size_t d = dim + 1; d < shape.size(); ++d) {
      b.offsets.push_back(0);
      b.extent.push_back(shape[d]);
    }
    out.push_back(std::move(b));
  };
  int64_t r0 = begin / inner;
  const int64_t r1 = end / inner;
  auto partial_row = [&](int64_t row, int64_t b, int64_t e) {
    Shape l = lead;
    l.push_back(row);
    cut(shape, dim + 1, b, e, l, out);
  };
  if (r0 == r1) {   // inside one row (only possible below the last dim)
    partial_row(r0, begin - r0 * inner, end - r0 * inner);
    return;
  }
  if (begin % inner != 0) {
    partial_row(r0, begin % inner, inner);
    ++r0;
  }
  if (r1 > r0) emit(r0, r1 - r0);
  if (end % inner != 0) partial_row(r1, 0, end % inner);
}

// The position of element `at` among a box's row-major elements.
int64_t row_major_index(const TensorBox& box, const Shape& at) {
  int64_t i = 0;
  for (size_t d = 0; d < at.size(); ++d) i = i * box.extent[d] + (at[d] - box.offsets[d]);
  return i;
}

void copy_dims(const char* src, const TensorBox& src_box, char* dst, const TensorBox& dst_box,
               const TensorBox& region, size_t elem, size_t dim, Shape& at) {
  const size_t last = region.extent.size() - 1;
  if (dim == last) {
    at[dim] = region.offsets[dim];
    std::memcpy(dst + size_t(row_major_index(dst_box, at)) * elem, src + size_t(row_major_index(src_box, at)) * elem,
                size_t(region.extent[dim]) * elem);
    return;
  }
  for (int64_t i = 0; i < region.extent[dim]; ++i) {
    at[dim] = region.offsets[dim] + i;
    copy_dims(src, src_box, dst, dst_box, region, elem, dim + 1, at);
  }
}
}  // namespace

std::vector<TensorBox> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end) {
  BB_CHECK(0 <= begin && begin <= end && end <= shape_numel(shape), "flat range [", begin, ", ", end,
           ") is outside a tensor of shape ", shape_str(shape));
  std::vector<TensorBox> out;
  if (shape.empty()) {
    if (begin < end) out.push_back({{}, {}});
    return out;
  }
  cut(shape, 0, begin, end, {}, out);
  return out;
}

TensorBox box_intersection(const TensorBox& a, const TensorBox& b) {
  TensorBox r{Shape(a.offsets.size(), 0), Shape(a.offsets.size(), 0)};
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.extent[d], b.offsets[d] + b.extent[d]);
    if (hi <= lo) return {Shape(a.offsets.size(), 0), Shape(a.offsets.size(), 0)};
    r.offsets[d] = lo;
    r.extent[d] = hi - lo;
  }
  return r;
}

void copy_box_region(const void* src, const TensorBox& src_box, void* dst, const TensorBox& dst_box,
                     const TensorBox& region, size_t elem) {
  if (region.extent.empty()) {   // a scalar
    std::memcpy(dst, src, elem);
    return;
  }
  if (region.numel() == 0) return;
  Shape at(region.extent.size(), 0);
  copy_dims(static_cast<const char*>(src), src_box, static_cast<char*>(dst), dst_box, region, elem, 0, at);
}

}  // namespace bb
