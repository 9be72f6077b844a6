// Pipeline schedules as data: the list of actions one pipeline rank runs for
// one step, generated per rank, then executed (run_pipeline_schedule in
// schedule.h) or simulated for every rank together (pipeline_simulation.h).
//
// Compute actions follow Megatron-Core's schedules:
//  * 1F1B (vpp = 1): rank r runs min(pp - r - 1, m) warm-up forwards, then
//    alternates one forward and one backward, then the remaining backwards.
//  * interleaved 1F1B (vpp > 1): rank r holds virtual stages v = 0..vpp-1
//    (global stage v * pp + r); forwards go over microbatch groups of pp, each
//    group through chunk 0, then chunk 1, ...; backwards through the chunks in
//    reverse. Warm-up is (pp - r - 1) * 2 + (vpp - 1) * pp forwards (all of
//    them when m == pp); m must be a multiple of pp, as Megatron requires.
//  * forward only: every forward in the 1F1B / interleaved forward order.
// Communication goes in Exchange batches (one batch_isend_irecv each) that
// carry the outputs computed since the previous batch and chosen inputs:
// in 1F1B the batch just before a compute action brings its input (with the
// previous action's output: Megatron's send_forward_recv_backward, ...); in
// the interleaved schedule each batch receives one step ahead, the inputs of
// the next forward and of the next backward, as Megatron's does. So a send
// of one microbatch overlaps the receive of the next. Activations travel
// forward (stage s -> s + 1), gradients backward (s -> s - 1); the peer of
// stage s +- 1 is pp rank r +- 1 modulo pp.
#pragma once

#include <string>
#include <vector>

namespace bb {

// One message of an Exchange: the output of `kind` (forward: activations,
// backward: gradients) of microbatch `microbatch`, produced by global stage
// `from_stage` and consumed by the next (forward) or previous (backward) one.
struct PipelineMessage {
  bool send = false;
  bool forward = true;
  int microbatch = 0;
  int from_stage = 0;
  int peer = 0;   // pp rank
  bool operator==(const PipelineMessage&) const = default;
};

struct PipelineAction {
  enum class Kind { Forward, Backward, Exchange };
  Kind kind = Kind::Forward;
  int microbatch = 0;   // Forward, Backward
  int chunk = 0;        // virtual stage on this rank (0..vpp-1)
  std::vector<PipelineMessage> messages;   // Exchange: posted together, sends first
};

// The actions of pp rank `rank`. Throws, naming the numbers, for
// num_microbatches < pp, or not a multiple of pp when vpp > 1.
std::vector<PipelineAction> pipeline_schedule(int pp, int vpp, int rank, int num_microbatches, bool forward_only);

// "F3.1" (forward of microbatch 3 on chunk 1), "B0.0", "X[>F2@1 <B1@3]" for logs and tests.
std::string describe(const PipelineAction& a);

}  // namespace bb
