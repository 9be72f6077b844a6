// Optimizer-state offload (optimizer.offload_fraction, Megatron's
// HybridDeviceOptimizer): which part of each group's optimizer shard lives in
// pinned host memory, and the host buffers that part steps in.
//
// The host part of a group is a prefix of this rank's shard, so it is one
// contiguous range of the master weights, moments and reduced gradients. Its
// end is chosen, as Megatron does, by walking the shard's pieces in buffer
// order (a piece: one parameter's elements in one bucket slice, or a slice's
// padding) across the groups and offloading whole pieces while the bytes
// offloaded so far are below `fraction` of the rank's optimizer state. The
// choice depends only on the layout, so it is the same on every run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb {

// The host-resident part of one group's optimizer shard: elements [0, numel).
struct HostOptimizerState {
  int64_t numel = 0;
  Tensor master, exp_avg, exp_avg_sq;   // the master dtype
  Tensor grad;      // the reduced gradients of the range, copied down each step
  Tensor params;    // the updated weights in the parameter dtype, copied up; undefined when it is the master dtype
  size_t state_bytes() const;     // master + moments
  size_t staging_bytes() const;   // grad + params
};

// Per group, the shard's piece ends in increasing order (the last one the
// shard's length) and the optimizer-state bytes of one shard element; returns
// per group how many leading shard elements live on the host. `fraction` in
// [0, 1]: 0 keeps everything on the device, 1 moves everything.
std::vector<int64_t> host_prefix_lengths(const std::vector<std::vector<int64_t>>& piece_ends,
                                         const std::vector<int64_t>& bytes_per_element, double fraction);

// One AdamW step of the host part on its gradients (the CPU op, so the
// update is the device-free path's bit for bit), then the new master weights
// cast into `params` when that is defined. Elementwise, so it runs on up to
// `threads` host threads over disjoint ranges without changing a bit.
void host_adamw_step(HostOptimizerState& s, const ops::AdamWParams& hp, int threads);

// The host buffers of a prefix of `numel` elements: pinned when the state's
// home is a GPU, so the copies run at bus speed beside the device's work.
HostOptimizerState make_host_optimizer_state(int64_t numel, DType master_dtype, DType grad_dtype, DType param_dtype,
                                             Device home);

}  // namespace bb
