// One parameter's part of a full HF tensor, and the full tensor back from the
// parts of a tensor-parallel group (the tensor-level half of
// weight_mapping.h).
#pragma once

#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

// Checks a checkpoint tensor `hf_name` (host) before it fills a float
// parameter: its dtype must be floating (an integer tensor would be cast
// silently) and every value finite, one pass over the tensor. Every rank scans
// the whole tensor, so all ranks fail alike and none waits in a collective.
void check_loadable_weight(const std::string& hf_name, const Tensor& full);

// This rank's part of a full tensor, as the parameter's local shape (host, in
// the full tensor's dtype; vocabulary padding rows zero).
Tensor shard_of_full(const Parameter& p, const Tensor& full);

// The full tensor (on the parameter's device, parameter dtype, vocabulary
// padding dropped) from every tp rank's part. Collective over the tp group
// unless replicated. Without tp it is a view of the parameter (no copy), so a
// weight export to the device or to pinned host memory moves each byte once;
// a caller that keeps it past the parameter's next update clones it.
Tensor gather_full(const Parameter& p, TensorParallel& tp);

}  // namespace bb
