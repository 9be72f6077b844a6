// Where a rank's device memory goes, by category: the long-lived state a
// model handle owns (weights, gradients, fp32 master weights, Adam moments)
// counted from the buffers themselves, and what a training step adds on top
// (activations and kernel workspaces) from the device's high-water mark.
// The optimizer state that optimizer.offload_fraction keeps in pinned host
// memory is reported on its own: it is not part of the device's peak.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

#include "bumblebee/runtime/runtime.h"

namespace bb {

struct MemoryBreakdown {
  size_t weights = 0;   // parameter values in the compute dtype
  size_t grads = 0;     // gradient buffers (frozen groups have none)
  size_t master = 0;    // fp32 master weights this rank's optimizer shard holds (0 when they are the params)
  size_t moments = 0;   // Adam exp_avg + exp_avg_sq of this rank's shard
  // Host-resident (optimizer.offload_fraction): master weights and moments of
  // the shard's host part, and its staging buffers (gradients down, weights up).
  size_t host_master = 0, host_moments = 0, host_staging = 0;
  bool host_is_device = false;   // a CPU runtime: the host part is in the device's pool too
  size_t total() const { return weights + grads + master + moments; }
  size_t host_total() const { return host_master + host_moments + host_staging; }
};

// The state `h` holds on this rank, from its buffers' sizes.
MemoryBreakdown memory_breakdown(const ModelHandle& h);

// A JSON object in GiB: the device categories above, `other_static` (what
// was in use before the step beyond them: rope tables, workspaces, the
// pool's caches), `activations_and_workspace` (the step's peak above that),
// and the host part as host_master, host_moments and host_staging.
// `in_use_before_step` and `peak` are device_bytes_in_use / device_peak_bytes.
nlohmann::json memory_breakdown_json(const MemoryBreakdown& m, size_t in_use_before_step, size_t peak);

}  // namespace bb
