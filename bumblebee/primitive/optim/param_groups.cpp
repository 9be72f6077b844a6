// make_param_groups: which group each parameter joins.
#include "bumblebee/primitive/optim/param_groups.h"

#include <regex>

namespace bb {

ParamGroupFn make_param_groups(dist::ParallelState& parallel, const ParamGroupOptions& options) {
  std::vector<std::regex> frozen;
  for (const std::string& pattern : options.frozen) {
    try {
      frozen.emplace_back(pattern);
    } catch (const std::regex_error& e) {
      BB_FAIL("frozen parameter pattern '", pattern, "' is not a valid regular expression: ", e.what());
    }
  }
  dist::Communicator* dense = parallel.cp_size() > 1 ? &parallel.dp_cp() : &parallel.dp();
  dist::Communicator* expert = &parallel.edp();
  const bool no_wd_1d = options.no_weight_decay_1d;
  return [frozen, dense, expert, no_wd_1d](const Parameter& p) {
    ParamGroupSpec spec;
    for (const std::regex& re : frozen) {
      if (!std::regex_match(p.name, re)) continue;
      spec.name = "frozen";
      spec.trainable = false;
      return spec;
    }
    if (p.cls == ParamClass::Buffer) {
      spec.name = "buffer";
      spec.trainable = false;
      return spec;
    }
    const bool is_expert = p.cls == ParamClass::Expert;
    spec.name = is_expert ? "expert" : "dense";
    spec.grad_comm = is_expert ? expert : dense;
    if (no_wd_1d && (p.full_shape.size() == 1 || p.name.ends_with(".bias"))) {
      spec.name += "_no_wd";
      spec.weight_decay_mult = 0.0;
    }
    return spec;
  };
}

}  // namespace bb
