// Op-level time accounting: where the time of a training step goes.
//
// While profiling is on, every op of the CUDA backend and every NCCL
// collective is bracketed by a pair of CUDA events recorded on the stream it
// runs on, so the figures are device time, not launch time, and recording
// does not synchronise the host; ops of the CPU backend, which run to the end
// before returning, are timed with the host clock. take() waits for the
// recorded work and sums by name. Off (the default), a Scope costs one branch.
//
// Names say what ran: "rmsnorm_forward", "matmul 8192x6144x1024 NT" (M x N x K
// of the product and the operands' layouts, so each projection of a layer
// has its own line), "nccl reduce_scatter_async [dp]". Collectives on their
// own stream overlap the compute stream, so the per-name totals can add up to
// more than the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bumblebee/core/device.h"

namespace bb::ops::profile {

void set_enabled(bool on);
bool enabled();

// Times the work done (CPU) or queued on `device`'s current stream (CUDA)
// between construction and destruction, under `name`.
class Scope {
 public:
  Scope(Device device, const std::string& name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int64_t record_ = -1;
};

struct OpTime {
  std::string name;
  int64_t calls = 0;
  double ms = 0;
  bool communication = false;   // an NCCL collective
  // What kind of work: gemm, attention, norm, elementwise, cross entropy,
  // optimizer, embedding, communication.
  std::string group;
  double flops = 0;   // GEMMs: 2 M N K per call, over all calls; 0 for the rest
};

// Waits for every timed op, returns the totals per name since the last take()
// (largest time first) and starts a new tally.
std::vector<OpTime> take();

}  // namespace bb::ops::profile
