// Microbatch schedules: the order in which a rank runs the forward and the
// backward of each microbatch on its model chunk.
//
// The sequential schedule (pp = 1) runs forward i then backward i, one
// microbatch after the other, so only one microbatch's activations are alive
// at a time; the last microbatch's backward reports each finished gradient
// (on_grad_ready) so the data-parallel reductions overlap the rest of it.
// The pipeline schedules (1F1B, interleaved, forward only; pipeline_schedule.h)
// run a rank's action list over its chunks and call the same hooks on the
// chunk that holds the loss.
#pragma once

#include <functional>
#include <vector>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/model/protocol.h"
#include "bumblebee/runtime/microbatch.h"

namespace bb {

struct ScheduleHooks {
  // The loss gradient to fold into the last stage's forward of microbatch i
  // (the built-in loss, known before the forward), or undefined.
  std::function<Tensor(size_t i)> fused_dloss;
  // The last stage's per-token loss (and entropy, undefined unless asked for)
  // of microbatch i -> the gradients that microbatch's backward starts from
  // (ignored when forward_only).
  struct LossGrads {
    Tensor dloss;      // [T] of the token loss
    Tensor dentropy;   // [T] of the entropy, or undefined
  };
  std::function<LossGrads(size_t i, const Tensor& token_loss, const Tensor& entropy)> loss;
  // The auxiliary loss of microbatch i's forward (ModelChunk::aux_loss), on the stages that hold the loss.
  std::function<void(size_t i, const AuxLoss& aux)> aux_loss;
};

void run_sequential_schedule(ModelChunk& chunk, const std::vector<PreparedMicroBatch>& microbatches,
                             bool forward_only, const ScheduleHooks& hooks, const GradReadyFn& on_grad_ready);

// Hidden states and their gradients between stages are [num_tokens / tp,
// hidden_size] of `dtype`: every stage prepares every microbatch of the
// batch, so both sides of a message know its token count without exchanging
// shapes. chunks[v] is virtual stage v of this rank (global stage
// v * pp + pp rank); `pp` is the pipeline communicator. The last backward of
// each chunk reports its finished gradients through on_grad_ready.
struct PipelineShapes {
  int64_t hidden_size = 0;
  int64_t tp = 1;
  DType dtype = DType::F32;
  Device device = Device::cpu();
};
void run_pipeline_schedule(const std::vector<ModelChunk*>& chunks, const std::vector<PreparedMicroBatch>& microbatches,
                           bool forward_only, const ScheduleHooks& hooks, const GradReadyFn& on_grad_ready,
                           dist::Communicator& pp, const PipelineShapes& shapes);

}  // namespace bb
