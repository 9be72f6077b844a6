// Shape, dtype, device, root, peer and count checks for the collectives.
#include "bumblebee/distributed/collective_checks.h"

#include <numeric>

namespace bb::dist {

namespace {

bool bytes_overlap(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b) || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

std::string describe(const P2POp& op) {
  return op.kind == P2POp::Kind::Send ? "send to peer " + std::to_string(op.peer)
                                      : "recv from peer " + std::to_string(op.peer);
}

void check_counts(const std::vector<int64_t>& counts, const char* counts_name, const Tensor& t,
                  const char* tensor_name, int group_size, const std::string& group) {
  BB_CHECK(int64_t(counts.size()) == group_size, "all_to_all on group ", group, " of size ", group_size, ": ",
           counts.size(), " ", counts_name, ", expected ", group_size);
  for (size_t j = 0; j < counts.size(); ++j)
    BB_CHECK(counts[j] >= 0, "all_to_all on group ", group, ": ", counts_name, "[", j, "] is ", counts[j]);
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  BB_CHECK(rows == t.size(0), "all_to_all on group ", group, ": ", counts_name, " sum to ", rows, " rows but ",
           tensor_name, " has ", t.size(0), " rows (shape ", shape_str(t.shape()), ")");
}

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

Device check_p2p_ops(const std::vector<P2POp>& ops, int rank, int group_size, const std::string& group) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    BB_CHECK(op.peer >= 0 && op.peer < group_size, describe(op), " on group ", group, ": peer ", op.peer,
             " is not a rank of a group of size ", group_size);
    BB_CHECK(op.tensor.defined(), describe(op), " on group ", group, ": undefined tensor");
    BB_CHECK(op.tensor.device() == ops[0].tensor.device(), "batch_isend_irecv on group ", group, ": op ", i, " (",
             describe(op), ") is on ", op.tensor.device().str(), " but op 0 (", describe(ops[0]), ") is on ",
             ops[0].tensor.device().str(), "; one batch moves tensors of one device");
  }
  std::vector<const Tensor*> to_self, from_self;
  for (const P2POp& op : ops)
    if (op.peer == rank) (op.kind == P2POp::Kind::Send ? to_self : from_self).push_back(&op.tensor);
  BB_CHECK(to_self.size() == from_self.size(), "batch_isend_irecv on group ", group, ": rank ", rank, " sends ",
           to_self.size(), " message(s) to itself but receives ", from_self.size(),
           "; a message to oneself is received by a recv from oneself in the same batch");
  for (size_t k = 0; k < to_self.size(); ++k) {
    const Tensor& sent = *to_self[k];
    const Tensor& received = *from_self[k];
    BB_CHECK(sent.dtype() == received.dtype() && sent.shape() == received.shape(), "batch_isend_irecv on group ",
             group, ": message ", k, " of rank ", rank, " to itself is ", dtype_name(sent.dtype()), " ",
             shape_str(sent.shape()), " but its recv is ", dtype_name(received.dtype()), " ",
             shape_str(received.shape()));
  }
  return ops.empty() ? Device::cpu() : ops[0].tensor.device();
}

void check_all_to_all_args(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                           const std::vector<int64_t>& recv_counts, int rank, int group_size,
                           const std::string& group) {
  BB_CHECK(in.defined() && out.defined(), "all_to_all on group ", group, ": undefined tensor");
  BB_CHECK(in.dtype() == out.dtype(), "all_to_all on group ", group, ": in is ", dtype_name(in.dtype()),
           " but out is ", dtype_name(out.dtype()));
  BB_CHECK(in.device() == out.device(), "all_to_all on group ", group, ": in is on ", in.device().str(),
           " but out is on ", out.device().str());
  BB_CHECK(in.dim() >= 1 && out.dim() >= 1, "all_to_all on group ", group,
           ": in and out must have at least one dimension (rows)");
  const Shape in_row(in.shape().begin() + 1, in.shape().end());
  const Shape out_row(out.shape().begin() + 1, out.shape().end());
  BB_CHECK(in_row == out_row, "all_to_all on group ", group, ": in ", shape_str(in.shape()), " has rows of shape ",
           shape_str(in_row), " but out ", shape_str(out.shape()), " has rows of shape ", shape_str(out_row));
  check_counts(send_counts, "send_counts", in, "in", group_size, group);
  check_counts(recv_counts, "recv_counts", out, "out", group_size, group);
  BB_CHECK(send_counts[size_t(rank)] == recv_counts[size_t(rank)], "all_to_all on group ", group, ": rank ", rank,
           " sends itself ", send_counts[size_t(rank)], " rows (send_counts[", rank, "]) but receives ",
           recv_counts[size_t(rank)], " from itself (recv_counts[", rank, "])");
  BB_CHECK(!bytes_overlap(in, out), "all_to_all on group ", group, ": in and out overlap");
}

int64_t row_numel(const Tensor& t) { return shape_numel(Shape(t.shape().begin() + 1, t.shape().end())); }

}  // namespace bb::dist
