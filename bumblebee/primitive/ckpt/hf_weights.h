// One parameter's part of a full HF tensor, and the full tensor back from the
// parts of a tensor-parallel group (the tensor-level half of
// weight_mapping.h).
#pragma once

#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

// This rank's part of a full tensor, as the parameter's local shape (host, in
// the full tensor's dtype; vocabulary padding rows zero).
Tensor shard_of_full(const Parameter& p, const Tensor& full);

// The full tensor (host, parameter dtype, vocabulary padding dropped) from
// every tp rank's part. Collective over the tp group unless replicated.
Tensor gather_full(const Parameter& p, TensorParallel& tp);

}  // namespace bb
