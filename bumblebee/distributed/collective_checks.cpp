// Shape, dtype, device and root checks for the collectives.
#include "bumblebee/distributed/collective_checks.h"

namespace bb::dist {

namespace {

bool check_split_along_dim0(const Tensor& whole, const Tensor& part, int rank, int group_size,
                            const std::string& group, const char* op, const char* whole_name, const char* part_name) {
  BB_CHECK(whole.defined() && part.defined(), op, " on group ", group, ": undefined tensor");
  BB_CHECK(whole.dtype() == part.dtype(), op, " on group ", group, ": ", whole_name, " is ",
           dtype_name(whole.dtype()), " but ", part_name, " is ", dtype_name(part.dtype()));
  BB_CHECK(whole.device() == part.device(), op, " on group ", group, ": ", whole_name, " is on ",
           whole.device().str(), " but ", part_name, " is on ", part.device().str());
  BB_CHECK(part.dim() >= 1, op, " on group ", group, ": ", part_name, " must have at least one dimension");
  Shape expected = part.shape();
  expected[0] *= group_size;
  BB_CHECK(whole.shape() == expected, op, " on group ", group, " of size ", group_size, ": ", whole_name,
           " has shape ", shape_str(whole.shape()), ", expected ", shape_str(expected), " from ", part_name, " ",
           shape_str(part.shape()));
  // Parameters and gradients are views into flat buffers, so sharing storage
  // is common; only overlapping bytes matter.
  if (!whole.shares_storage(part)) return false;
  const char* w = static_cast<const char*>(whole.raw());
  const char* p = static_cast<const char*>(part.raw());
  if (p + part.nbytes() <= w || w + whole.nbytes() <= p) return false;
  BB_CHECK(p == w + size_t(rank) * part.nbytes(), op, " on group ", group, ": ", whole_name, " and ", part_name,
           " overlap but ", part_name, " is not rank ", rank, "'s own rows of ", whole_name);
  return true;
}

}  // namespace

bool check_all_gather_args(const Tensor& in, const Tensor& out, int rank, int group_size, const std::string& group) {
  return check_split_along_dim0(out, in, rank, group_size, group, "all_gather", "out", "in");
}

bool check_reduce_scatter_args(const Tensor& in, const Tensor& out, int rank, int group_size,
                               const std::string& group) {
  return check_split_along_dim0(in, out, rank, group_size, group, "reduce_scatter", "in", "out");
}

void check_root(int root, int group_size, const std::string& group) {
  BB_CHECK(root >= 0 && root < group_size, "broadcast on group ", group, ": root ", root,
           " is not a rank of a group of size ", group_size);
}

}  // namespace bb::dist
