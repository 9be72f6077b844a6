// The pieces of a rank's parameters and optimizer slices for sharded checkpoints.
#include "bumblebee/runtime/sharded_state.h"

#include <algorithm>
#include <set>

#include "bumblebee/core/error.h"

namespace bb {

namespace {
using State = DistributedOptimizer::State;

struct Part {
  State state;
  const char* prefix;
};
constexpr Part kOptimizerParts[] = {{State::Master, "master/"}, {State::ExpAvg, "exp_avg/"}, {State::ExpAvgSq, "exp_avg_sq/"}};

// Shard elements [pos, pos + n) of `which`. With optimizer.offload_fraction the
// shard's first host.numel elements live in host memory and the device
// tensors hold the rest from there on; a master that is the parameters (one
// rank, master dtype = parameter dtype) is the whole flat buffer. Callers split
// ranges at host.numel, so a view lies in one part.
Tensor shard_view(DistributedOptimizer::GroupState& g, State which, int64_t pos, int64_t n) {
  const int64_t h = g.host.numel;
  if (pos < h) {
    BB_CHECK(pos + n <= h, "optimizer piece [", pos, ", ", pos + n, ") straddles the host part's end ", h);
    Tensor& host = which == State::Master ? g.host.master : which == State::ExpAvg ? g.host.exp_avg : g.host.exp_avg_sq;
    return host.narrow(pos, n);
  }
  if (which == State::Master && g.master_is_param) return g.master.narrow(pos, n);
  Tensor& dev = which == State::Master ? g.master : which == State::ExpAvg ? g.exp_avg : g.exp_avg_sq;
  return dev.narrow(pos - h, n);
}

std::set<const Parameter*> skipped_copies(ModelChunk& chunk, PieceUse use) {
  std::set<const Parameter*> out;
  if (use == PieceUse::Save && !chunk.is_first_stage())
    for (const Parameter* p : chunk.tied_params()) out.insert(p);
  return out;
}
}  // namespace

TensorBox parameter_box(const Parameter& p) {
  TensorBox b{Shape(p.full_shape.size(), 0), p.full_shape};
  switch (p.shard) {
    case ShardKind::Replicated: break;
    case ShardKind::Column:
    case ShardKind::Vocab:
      b.offsets[0] = p.shard_begin;
      b.extent[0] = p.shard_valid;
      break;
    case ShardKind::Row:
      b.offsets[1] = p.shard_begin;
      b.extent[1] = p.local_shape[1];
      break;
  }
  return b;
}

std::vector<TensorPiece> training_state_pieces(ModelState& st, PieceUse use) {
  std::vector<TensorPiece> out;
  for (auto& chunk : st.chunks) {
    const std::set<const Parameter*> skip = skipped_copies(*chunk, use);
    for (auto& group : chunk->params().groups())
      for (Parameter* p : group->params()) {
        if (skip.count(p)) continue;
        const TensorBox box = parameter_box(*p);
        // The valid elements lead the local tensor: vocabulary padding rows come last.
        out.push_back({"model/" + p->name, p->full_shape, box, group->flat_params().narrow(p->offset, box.numel())});
      }
  }
  DistributedOptimizer& opt = *st.optimizer;
  for (const Part& part : kOptimizerParts)
    for (DistributedOptimizer::GroupState& g : opt.groups()) {
      const std::set<const Parameter*> skip = skipped_copies(*st.chunks[size_t(g.store_index)], use);
      for (const GradReducer::Slice& s : g.reducer->slices())
        for (Parameter* p : g.group->params()) {
          if (skip.count(p)) continue;
          const TensorBox local = parameter_box(*p);
          const int64_t lo = std::max(p->offset, s.flat_begin);
          const int64_t hi = std::min(p->offset + local.numel(), s.flat_begin + s.numel);
          if (lo >= hi) continue;
          // The parameter-local flat range [from, to) at shard position `at`, as boxes of the HF tensor.
          auto add = [&](int64_t from, int64_t to, int64_t at) {
            for (TensorBox box : flat_range_boxes(local.extent, from - p->offset, to - p->offset)) {
              const int64_t n = box.numel();
              for (size_t d = 0; d < box.offsets.size(); ++d) box.offsets[d] += local.offsets[d];
              out.push_back({part.prefix + p->name, p->full_shape, box, shard_view(g, part.state, at, n)});
              at += n;
            }
          };
          const int64_t at = s.shard_begin + (lo - s.flat_begin);
          const int64_t split = std::clamp(lo + (g.host.numel - at), lo, hi);   // where the host part ends
          if (split > lo) add(lo, split, at);
          if (hi > split) add(split, hi, at + (split - lo));
        }
    }
  return out;
}

}  // namespace bb
