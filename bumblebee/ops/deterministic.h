// Deterministic mode, set from the runtime's backend.deterministic at
// build_model (Megatron's --deterministic-mode).
//
// Off (the default), a CUDA backward may sum with atomics whose order varies
// from run to run: two identical runs then differ in the last bits of the
// gradients and drift apart in the loss. On, every op that has an
// order-dependent sum takes a fixed order instead, so a run repeats bitwise at
// the same layout and device (what resume exactness needs):
//
//   embedding backward - rows sorted by token id, each id's rows summed in row order
//   cuDNN attention    - SDPA backward with cuDNN's deterministic algorithm
//   flash attention    - refused (its dQ uses atomics); use the cudnn backend
//
// RMSNorm's weight gradient is summed in a fixed order always. CPU ops are
// deterministic either way.
#pragma once

namespace bb::ops {

void set_deterministic(bool on);
bool deterministic();

}  // namespace bb::ops
