// The sequential schedule.
#include "bumblebee/runtime/schedule.h"

namespace bb {

void run_sequential_schedule(ModelChunk& chunk, const std::vector<PreparedMicroBatch>& microbatches,
                             bool forward_only, const ScheduleHooks& hooks, const GradReadyFn& on_grad_ready) {
  BB_CHECK(chunk.is_first_stage() && chunk.is_last_stage(),
           "the sequential schedule runs the whole model on one rank (pp = 1)");
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const DeviceMicroBatch& mb = microbatches[i].device;
    const Tensor fused = forward_only ? Tensor() : hooks.fused_dloss(i);
    std::unique_ptr<ForwardState> state;
    const Tensor token_loss = chunk.forward(mb, Tensor(), fused, state);
    const Tensor dloss = hooks.loss(i, token_loss);
    if (hooks.aux_loss) hooks.aux_loss(i, chunk.aux_loss(*state));
    if (forward_only) continue;
    const bool last = i + 1 == microbatches.size();
    chunk.backward(mb, fused.defined() ? fused : dloss, *state, last ? on_grad_ready : GradReadyFn());
  }
}

}  // namespace bb
