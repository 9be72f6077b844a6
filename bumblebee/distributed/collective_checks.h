// Argument checks shared by every Communicator implementation, so a wrong
// shape fails with the same message whichever engine carries the collective.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/distributed/communicator.h"

namespace bb::dist {

// out is [group_size * in.size(0), rest of in's shape], same dtype and device.
// The two may overlap only when in is this rank's own rows of out (the
// in-place form a sharded optimizer uses); returns whether that is the case.
bool check_all_gather_args(const Tensor& in, const Tensor& out, int rank, int group_size, const std::string& group);
// in is [group_size * out.size(0), rest of out's shape], same dtype and device;
// out may be this rank's own rows of in. Returns whether it is.
bool check_reduce_scatter_args(const Tensor& in, const Tensor& out, int rank, int group_size,
                               const std::string& group);
void check_root(int root, int group_size, const std::string& group);

// Every op has a tensor and a peer of the group, all tensors are on one
// device, and the messages to this rank itself pair up, in order, with its
// recvs from itself at equal dtype and shape. Returns the ops' device (the
// host for an empty batch).
Device check_p2p_ops(const std::vector<P2POp>& ops, int rank, int group_size, const std::string& group);
// in and out share dtype, device and the shape of a row (all but dim 0); each
// counts vector has group_size non-negative entries summing to its tensor's
// rows; this rank sends itself as many rows as it receives from itself; in
// and out do not overlap.
void check_all_to_all_args(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                           const std::vector<int64_t>& recv_counts, int rank, int group_size,
                           const std::string& group);
// Elements in one dim-0 row of t.
int64_t row_numel(const Tensor& t);

}  // namespace bb::dist
