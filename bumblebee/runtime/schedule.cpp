// The sequential schedule and the pipeline schedules' executor.
#include "bumblebee/runtime/schedule.h"

#include <map>
#include <tuple>

#include "bumblebee/runtime/pipeline_schedule.h"

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
    const ScheduleHooks::LossGrads grads = hooks.loss(i, token_loss, chunk.entropy(*state));
    if (hooks.aux_loss) hooks.aux_loss(i, chunk.aux_loss(*state));
    if (forward_only) continue;
    if (grads.dentropy.defined()) chunk.set_entropy_grad(*state, grads.dentropy);
    const bool last = i + 1 == microbatches.size();
    chunk.backward(mb, fused.defined() ? fused : grads.dloss, *state, last ? on_grad_ready : GradReadyFn());
  }
}

void run_pipeline_schedule(const std::vector<ModelChunk*>& chunks, const std::vector<PreparedMicroBatch>& microbatches,
                           bool forward_only, const ScheduleHooks& hooks, const GradReadyFn& on_grad_ready,
                           dist::Communicator& pp, const PipelineShapes& shapes) {
  const int num_pp = pp.size(), rank = pp.rank(), vpp = int(chunks.size());
  const int m = int(microbatches.size());
  const int stages = num_pp * vpp;
  // Keyed by (forward?, microbatch, global stage that produced the message).
  using Key = std::tuple<bool, int, int>;
  std::map<Key, Tensor> outbox, inbox;
  std::map<std::pair<int, int>, std::unique_ptr<ForwardState>> states;   // (microbatch, chunk)
  std::map<std::pair<int, int>, Tensor> loss_grads;                      // the last stage's dloss
  for (const PipelineAction& a : pipeline_schedule(num_pp, vpp, rank, m, forward_only)) {
    if (a.kind == PipelineAction::Kind::Exchange) {
      std::vector<dist::P2POp> ops;
      for (const PipelineMessage& msg : a.messages) {
        const Key key{msg.forward, msg.microbatch, msg.from_stage};
        if (msg.send) {
          const auto it = outbox.find(key);
          BB_CHECK(it != outbox.end(), "pipeline rank ", rank, ": nothing to send for ", describe(a));
          ops.push_back(dist::P2POp::send(it->second, msg.peer));
          continue;
        }
        const int64_t tokens = microbatches[size_t(msg.microbatch)].device.num_tokens / shapes.tp;
        Tensor buf = Tensor::empty({tokens, shapes.hidden_size}, shapes.dtype, shapes.device);
        inbox[key] = buf;
        ops.push_back(dist::P2POp::recv(buf, msg.peer));
      }
      pp.batch_isend_irecv(ops)->wait();
      for (const PipelineMessage& msg : a.messages)
        if (msg.send) outbox.erase(Key{msg.forward, msg.microbatch, msg.from_stage});
      continue;
    }
    ModelChunk& chunk = *chunks[size_t(a.chunk)];
    const int i = a.microbatch, stage = a.chunk * num_pp + rank;
    const DeviceMicroBatch& mb = microbatches[size_t(i)].device;
    if (a.kind == PipelineAction::Kind::Forward) {
      Tensor hidden_in;
      if (stage > 0) {
        const auto it = inbox.find(Key{true, i, stage - 1});
        BB_CHECK(it != inbox.end(), "pipeline rank ", rank, ": no input received for ", describe(a));
        hidden_in = it->second;
        inbox.erase(it);
      }
      const bool last = stage + 1 == stages;
      const Tensor fused = last && !forward_only ? hooks.fused_dloss(size_t(i)) : Tensor();
      std::unique_ptr<ForwardState>& state = states[{i, a.chunk}];
      const Tensor out = chunk.forward(mb, hidden_in, fused, state);
      if (hooks.aux_loss) hooks.aux_loss(size_t(i), chunk.aux_loss(*state));
      if (!last) {
        BB_CHECK(out.shape() == Shape({mb.num_tokens / shapes.tp, shapes.hidden_size}) && out.dtype() == shapes.dtype,
                 "stage ", stage, " returned hidden states ", dtype_name(out.dtype()), shape_str(out.shape()),
                 ", the pipeline sends ", dtype_name(shapes.dtype), shape_str({mb.num_tokens / shapes.tp, shapes.hidden_size}));
        outbox[Key{true, i, stage}] = out;
      } else {
        const ScheduleHooks::LossGrads grads = hooks.loss(size_t(i), out, chunk.entropy(*state));
        if (grads.dentropy.defined() && !forward_only) chunk.set_entropy_grad(*state, grads.dentropy);
        loss_grads[{i, a.chunk}] = fused.defined() ? fused : grads.dloss;
      }
      if (forward_only) states.erase({i, a.chunk});
      continue;
    }
    Tensor grad;
    if (stage + 1 == stages) {
      grad = loss_grads.at({i, a.chunk});
      loss_grads.erase({i, a.chunk});
    } else {
      const auto it = inbox.find(Key{false, i, stage + 1});
      BB_CHECK(it != inbox.end(), "pipeline rank ", rank, ": no gradient received for ", describe(a));
      grad = it->second;
      inbox.erase(it);
    }
    const auto st = states.find({i, a.chunk});
    const Tensor dx = chunk.backward(mb, grad, *st->second, i + 1 == m ? on_grad_ready : GradReadyFn());
    states.erase(st);
    if (stage > 0) outbox[Key{false, i, stage}] = dx;
  }
  BB_CHECK(outbox.empty() && inbox.empty(), "pipeline rank ", rank, ": ", outbox.size(), " messages unsent, ",
           inbox.size(), " unused after the schedule");
}

}  // namespace bb
