// The runtime's rule for parameter groups (see ParamGroup in parameter.h).
//
//   dense parameters    -> "dense", gradients reduced over dp (dp x cp when cp > 1)
//   expert parameters   -> "expert", reduced over the expert-data-parallel group
//   with no_weight_decay_1d, 1-D parameters and biases (Megatron's default:
//   norm weights) go to "<class>_no_wd" with a weight-decay multiplier of 0
//   parameters matching a `frozen` pattern -> "frozen": no gradient buffer,
//   no optimizer state, no weight gradient computed in backward
#pragma once

#include <string>
#include <vector>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

struct ParamGroupOptions {
  bool no_weight_decay_1d = false;
  // ECMAScript regular expressions matched against the whole HF name.
  std::vector<std::string> frozen;
};

ParamGroupFn make_param_groups(dist::ParallelState& parallel, const ParamGroupOptions& options);

}  // namespace bb
