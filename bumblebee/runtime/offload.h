// Offload: a model's parameters, gradients and optimizer state moved to
// page-locked host memory between training phases (an RL rollout, an
// evaluation on another engine) and back, with the device memory handed back
// to the driver. Runtime::to drives it; the state is moved in place (every
// view of a buffer follows it), so training after a round trip is the same
// computation on the same bits.
#pragma once

#include <string>

#include "bumblebee/core/device.h"

namespace bb {

struct ModelState;

// Which parts of a model's state a move covers; also, in ModelState, which
// parts are on the host now.
struct OffloadParts {
  bool model = true;       // the parameters (and, when they are the master weights, those)
  bool optimizer = true;   // fp32 master weights and Adam moments
  bool grad = true;        // the gradient buffers and reduced-gradient shards
  bool any() const { return model || optimizer || grad; }
  std::string str() const;   // "model, grad": the parts that are set
};

// Moves `parts` to pinned host memory and releases the freed blocks of
// `home`'s pool. Waits for gradient reductions in flight first.
void offload_to_host(ModelState& st, const OffloadParts& parts, Device home);
// Moves `parts` back to `home` (parts already there stay).
void reload_to_device(ModelState& st, const OffloadParts& parts, Device home);
// Fails naming `call` and the offloaded parts when any of `needed` is on the host.
void check_on_device(const ModelState& st, const OffloadParts& needed, const char* call);

}  // namespace bb
