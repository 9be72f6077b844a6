// Every gradient of a model, its trainable groups' flat buffers one after
// another, for tests that compare two runs' gradients element by element.
#pragma once

#include <vector>

#include "bumblebee/runtime/runtime.h"

namespace bb::test {

inline std::vector<double> all_grads(ModelHandle& h) {
  std::vector<double> out;
  for (auto& g : h.model().params().groups()) {
    if (!g->flat_grads().defined()) continue;
    const std::vector<double> v = g->flat_grads().to_doubles();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace bb::test
