// Argument checks shared by every Communicator implementation, so a wrong
// shape fails with the same message whichever engine carries the collective.
#pragma once

#include "bumblebee/core/tensor.h"

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

}  // namespace bb::dist
