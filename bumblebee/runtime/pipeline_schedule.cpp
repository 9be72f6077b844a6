// Generation of the 1F1B, interleaved 1F1B and forward-only action lists.
#include "bumblebee/runtime/pipeline_schedule.h"

#include <algorithm>
#include <sstream>

#include "bumblebee/core/error.h"

namespace bb {

namespace {

struct Compute {
  bool forward;
  int microbatch, chunk;
};

// Megatron's get_model_chunk_id / microbatch id of the k-th forward (or
// backward) of a rank in the interleaved schedule, microbatch groups of pp.
Compute interleaved_op(int k, int pp, int vpp, bool forward) {
  const int group = k / (pp * vpp), in_group = k % (pp * vpp);
  const int chunk = in_group / pp;
  return {forward, group * pp + in_group % pp, forward ? chunk : vpp - 1 - chunk};
}

// The k-th forward or backward of a rank (k over microbatches x chunks).
Compute nth_op(int k, int pp, int vpp, bool forward) {
  return vpp == 1 ? Compute{forward, k, 0} : interleaved_op(k, pp, vpp, forward);
}

// Forwards before the first backward.
int warmup_count(int pp, int vpp, int rank, int m, bool forward_only) {
  const int total = m * vpp;
  if (forward_only) return total;
  const int w = vpp == 1 ? pp - rank - 1 : (m == pp ? total : (pp - rank - 1) * 2 + (vpp - 1) * pp);
  return std::min(w, total);
}

// Builds a rank's action list: compute actions, and Exchange batches of the
// sends of the compute actions since the last batch plus chosen receives.
class ActionList {
 public:
  ActionList(int pp, int vpp, int rank) : pp_(pp), stages_(pp * vpp), rank_(rank) {}
  int stage(const Compute& c) const { return c.chunk * pp_ + rank_; }
  bool needs_input(const Compute& c) const { return c.forward ? stage(c) > 0 : stage(c) + 1 < stages_; }
  PipelineMessage input_of(const Compute& c) const {
    return c.forward ? PipelineMessage{false, true, c.microbatch, stage(c) - 1, (rank_ + pp_ - 1) % pp_}
                     : PipelineMessage{false, false, c.microbatch, stage(c) + 1, (rank_ + 1) % pp_};
  }
  void compute(const Compute& c) {
    PipelineAction a;
    a.kind = c.forward ? PipelineAction::Kind::Forward : PipelineAction::Kind::Backward;
    a.microbatch = c.microbatch;
    a.chunk = c.chunk;
    actions_.push_back(a);
    const int s = stage(c);
    if (c.forward && s + 1 < stages_) sends_.push_back({true, true, c.microbatch, s, (rank_ + 1) % pp_});
    if (!c.forward && s > 0) sends_.push_back({true, false, c.microbatch, s, (rank_ + pp_ - 1) % pp_});
  }
  void want(std::vector<PipelineMessage>& recvs, const Compute& c) const {
    if (needs_input(c)) recvs.push_back(input_of(c));
  }
  // Posts the pending sends and `recvs` as one batch. Forward-direction
  // messages go before backward ones on both sides, so two messages between
  // the same pair of ranks in one batch match in the same order.
  void exchange(std::vector<PipelineMessage> recvs) {
    std::vector<PipelineMessage> msgs = std::move(sends_);
    sends_.clear();
    msgs.insert(msgs.end(), recvs.begin(), recvs.end());
    if (msgs.empty()) return;
    std::stable_sort(msgs.begin(), msgs.end(), [](const PipelineMessage& x, const PipelineMessage& y) {
      return std::pair{!x.send, !x.forward} < std::pair{!y.send, !y.forward};
    });
    PipelineAction x;
    x.kind = PipelineAction::Kind::Exchange;
    x.messages = std::move(msgs);
    actions_.push_back(std::move(x));
  }
  std::vector<PipelineAction> take() { return std::move(actions_); }

 private:
  int pp_, stages_, rank_;
  std::vector<PipelineAction> actions_;
  std::vector<PipelineMessage> sends_;
};

}  // namespace

std::vector<PipelineAction> pipeline_schedule(int pp, int vpp, int rank, int num_microbatches, bool forward_only) {
  BB_CHECK(pp >= 1 && vpp >= 1 && rank >= 0 && rank < pp, "pipeline schedule for rank ", rank, " of pp ", pp,
           ", vpp ", vpp);
  BB_CHECK(num_microbatches >= pp, "num_microbatches ", num_microbatches, " < pp ", pp,
           ": a pipeline needs at least one microbatch per stage");
  BB_CHECK(vpp == 1 || num_microbatches % pp == 0, "the interleaved schedule (vpp ", vpp, ") needs num_microbatches ",
           "divisible by pp ", pp, ", got ", num_microbatches, " (as Megatron requires)");
  const int total = num_microbatches * vpp;
  const int warmup = warmup_count(pp, vpp, rank, num_microbatches, forward_only);
  const int steady = total - warmup;   // forward-backward pairs
  auto fwd = [&](int k) { return nth_op(k, pp, vpp, true); };
  auto bwd = [&](int k) { return nth_op(k, pp, vpp, false); };
  ActionList list(pp, vpp, rank);
  if (vpp == 1) {
    // Megatron's 1F1B: each compute action's input arrives in the batch just
    // before it, with the previous action's output (send_forward_recv_backward, ...).
    std::vector<Compute> order;
    for (int k = 0; k < warmup; ++k) order.push_back(fwd(k));
    for (int k = 0; k < steady; ++k) order.insert(order.end(), {fwd(warmup + k), bwd(k)});
    if (!forward_only)
      for (int k = steady; k < total; ++k) order.push_back(bwd(k));
    for (const Compute& c : order) {
      std::vector<PipelineMessage> recvs;
      list.want(recvs, c);
      list.exchange(std::move(recvs));
      list.compute(c);
    }
    list.exchange({});
    return list.take();
  }
  // Megatron's interleaved schedule receives one step ahead: the batch after
  // a forward (or a forward-backward pair, or a backward) brings the input of
  // the next forward and of the next backward.
  {
    std::vector<PipelineMessage> recvs;
    list.want(recvs, fwd(0));
    list.exchange(std::move(recvs));
  }
  for (int k = 0; k < warmup; ++k) {
    list.compute(fwd(k));
    std::vector<PipelineMessage> recvs;
    if (k + 1 < total) list.want(recvs, fwd(k + 1));
    if (k + 1 == warmup && steady > 0) list.want(recvs, bwd(0));
    list.exchange(std::move(recvs));
  }
  if (!forward_only && steady == 0) {
    std::vector<PipelineMessage> recvs;
    list.want(recvs, bwd(0));
    list.exchange(std::move(recvs));
  }
  for (int k = 0; k < steady; ++k) {
    list.compute(fwd(warmup + k));
    list.compute(bwd(k));
    std::vector<PipelineMessage> recvs;
    if (warmup + k + 1 < total) list.want(recvs, fwd(warmup + k + 1));
    if (k + 1 < total) list.want(recvs, bwd(k + 1));
    list.exchange(std::move(recvs));
  }
  if (!forward_only) {
    for (int k = steady; k < total; ++k) {
      list.compute(bwd(k));
      std::vector<PipelineMessage> recvs;
      if (k + 1 < total) list.want(recvs, bwd(k + 1));
      list.exchange(std::move(recvs));
    }
  }
  return list.take();
}

std::string describe(const PipelineAction& a) {
  std::ostringstream s;
  switch (a.kind) {
    case PipelineAction::Kind::Forward: s << "F" << a.microbatch << "." << a.chunk; return s.str();
    case PipelineAction::Kind::Backward: s << "B" << a.microbatch << "." << a.chunk; return s.str();
    case PipelineAction::Kind::Exchange: break;
  }
  s << "X[";
  for (size_t i = 0; i < a.messages.size(); ++i) {
    const PipelineMessage& m = a.messages[i];
    s << (i ? " " : "") << (m.send ? ">" : "<") << (m.forward ? "F" : "B") << m.microbatch << "@" << m.from_stage;
  }
  s << "]";
  return s.str();
}

}  // namespace bb
