// SparseMoE forward and backward: routing, permutation, the tp share of the rows, the grouped experts.
#include "bumblebee/primitive/modules/moe/sparse_moe.h"

#include <algorithm>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/moe/expert_capacity.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"
#include "bumblebee/primitive/modules/moe/router_replay.h"

namespace bb {

namespace {
// Tp rank `rank`'s slice [begin, begin + rows) of the n rows sorted by expert,
// and how many of them each expert has.
struct RowShare {
  int64_t begin = 0, rows = 0;
  std::vector<int64_t> rows_per_expert;
};

RowShare row_share(const std::vector<int64_t>& rows_per_expert, int rank, int ranks) {
  int64_t n = 0;
  for (int64_t c : rows_per_expert) n += c;
  RowShare s;
  s.begin = n * rank / ranks;
  s.rows = n * (rank + 1) / ranks - s.begin;
  const int64_t end = s.begin + s.rows;
  int64_t at = 0;
  for (int64_t c : rows_per_expert) {
    s.rows_per_expert.push_back(std::max<int64_t>(0, std::min(at + c, end) - std::max(at, s.begin)));
    at += c;
  }
  return s;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> o(1, 0);
  for (int64_t c : counts) o.push_back(o.back() + c);
  return o;
}

// `share` as rows [begin, begin + share.size(0)) of an otherwise zero [n, H] tensor.
Tensor place_share(const Tensor& share, int64_t begin, int64_t n) {
  Tensor full = Tensor::zeros({n, share.size(1)}, share.dtype(), share.device());
  if (share.size(0) > 0) full.narrow(begin, share.size(0)).copy_from(share);
  return full;
}
}  // namespace

SparseMoE::SparseMoE(ParamStore& store, const std::string& prefix, const SparseMoEConfig& cfg, ParallelContext& pc)
    : cfg_(cfg),
      router_(store, prefix + "gate.",
              {cfg.hidden, cfg.num_experts,
               {cfg.score, cfg.top_k, cfg.norm_topk_prob, cfg.num_groups, cfg.topk_groups, cfg.routed_scaling_factor},
               cfg.bias_update != nullptr}),
      tp_(&pc.tp()) {
  if (cfg.bias_update) bias_index_ = cfg.bias_update->add_layer(*router_.bias());
  int64_t first = 0, local = cfg.num_experts;
  if (pc.ep().size() > 1 || pc.etp().size() > 1) {
    dispatcher_.emplace(pc.ep(), pc.etp().group(), cfg.num_experts);
    first = dispatcher_->first_local_expert();
    local = dispatcher_->local_experts();
  }
  experts_.emplace(store, prefix + "experts.", first, local, cfg.hidden, cfg.moe_ffn, cfg.recompute_activation,
                   ShardInfo{ShardKind::Column, pc.etp().rank(), pc.etp().size()});
}

Tensor SparseMoE::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  s->x = tp_->enter(x);
  s->aux = seq.router_aux;
  const bool z_loss = s->aux && s->aux->config().z_coeff != 0.0;
  RouterReplay* replay = seq.router_replay;
  const bool replaying = replay && replay->mode() == RouterReplayMode::Replay;
  s->routing = router_.forward(
      s->x, replaying ? replay->forced_experts(cfg_.moe_index, s->x.size(0), x.device()) : Tensor(), z_loss);
  Routing& r = s->routing;
  row_counts_.start(r);
  const int64_t n = r.token_of_row.size(0);
  s->x_perm = Tensor::empty({n, cfg_.hidden}, x.dtype(), x.device());
  ops::moe_permute(s->x, r.token_of_row, s->x_perm);
  row_counts_.finish(r);
  if (replay && replay->mode() == RouterReplayMode::Record) replay->record(cfg_.moe_index, s->routing.experts);
  const std::vector<int64_t>& rows_per_expert = r.rows_per_expert;
  int64_t dropped = 0;
  if (cfg_.capacity_factor > 0) {
    const int64_t capacity = expert_capacity(r.tokens, cfg_.top_k, cfg_.num_experts, cfg_.capacity_factor);
    const std::vector<double> keep = capacity_keep_mask(r.row_weights.to_doubles(), rows_per_expert, capacity);
    for (double k : keep) dropped += k == 0.0 ? 1 : 0;
    if (dropped > 0) {
      s->row_keep = Tensor::from_doubles(keep, {n}, r.row_weights.dtype()).to(x.device());
      Tensor kept = Tensor::empty({n}, r.row_weights.dtype(), x.device());
      ops::mul(r.row_weights, s->row_keep, kept);
      r.row_weights = kept;
    }
  }
  const RowShare share = row_share(r.rows_per_expert, tp_->rank(), tp_->size());
  s->share_begin = share.begin;
  s->share_rows = share.rows;
  const Tensor x_share = tp_->size() > 1 ? s->x_perm.narrow(share.begin, share.rows) : s->x_perm;
  if (dispatcher_) {
    s->plan = dispatcher_->plan(share.rows_per_expert);
    s->offsets = s->plan.local_offsets;
    s->x_experts = dispatcher_->dispatch(s->plan, x_share);
  } else {
    s->offsets = offsets_of(share.rows_per_expert);
    s->x_experts = x_share;
  }
  const Tensor y_experts = experts_->forward(s->x_experts, s->offsets, s->experts);
  const Tensor y_share = dispatcher_ ? dispatcher_->combine(s->plan, y_experts) : y_experts;
  s->y_perm = tp_->size() > 1 ? place_share(y_share, share.begin, n) : y_share;
  Tensor y = Tensor::empty(s->x.shape(), x.dtype(), x.device());
  ops::moe_unpermute(s->y_perm, r.token_of_row, r.row_weights, y, r.rows_by_token);

  // The auxiliary loss's P are the router probabilities (HF applies the
  // softmax to the router logits once more, in load_balancing_loss_func).
  // A recomputed forward finds the accumulator finished and adds nothing.
  if (s->aux) {
    s->aux->add_layer(r.scores, rows_per_expert);
    if (z_loss && !s->aux->finished()) {
      double z = 0;
      for (double l : r.lse.to_doubles()) z += l * l;
      s->aux->add_z_loss(r.tokens > 0 ? z / double(r.tokens) : 0.0);
    }
    s->aux->add_load(cfg_.layer, rows_per_expert, dropped);
  }
  state = std::move(s);
  return tp_->exit(y);
}

Tensor SparseMoE::backward(const Tensor& dy_shard, const SequenceLayout&, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "SparseMoE::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  const Routing& r = s.routing;
  const Tensor dy = tp_->exit_backward(dy_shard);
  const int64_t n = s.x_perm.size(0);
  Tensor dy_perm = Tensor::empty({n, cfg_.hidden}, dy.dtype(), dy.device());
  // y_perm is zero outside this tp rank's share, so drow_weights is this rank's part.
  Tensor drow_weights = Tensor::empty({n}, r.row_weights.dtype(), dy.device());
  ops::moe_unpermute_backward(dy, s.y_perm, r.token_of_row, r.row_weights, dy_perm, drow_weights);
  if (s.row_keep.defined()) {   // a dropped row's weight is a constant 0
    Tensor kept = Tensor::empty({n}, drow_weights.dtype(), dy.device());
    ops::mul(drow_weights, s.row_keep, kept);
    drow_weights = kept;
  }
  const Tensor dy_share = tp_->size() > 1 ? dy_perm.narrow(s.share_begin, s.share_rows) : dy_perm;

  // dispatch and combine are each other's adjoints: the output gradient goes
  // out like the input rows did, the input gradient comes back like the output.
  const Tensor dy_experts = dispatcher_ ? dispatcher_->dispatch(s.plan, dy_share) : dy_share;
  const Tensor dx_experts = experts_->backward(dy_experts, s.experts);
  const Tensor dx_share = dispatcher_ ? dispatcher_->combine(s.plan, dx_experts) : dx_experts;
  const Tensor dx_perm = tp_->size() > 1 ? place_share(dx_share, s.share_begin, n) : dx_share;
  Tensor dx = Tensor::empty(s.x.shape(), dy.dtype(), dy.device());
  ops::moe_permute_backward(dx_perm, r.token_of_row, dx, r.rows_by_token);

  // The auxiliary loss through P: the same gradient [E] for every token's
  // scores. Every tp rank routed all tokens, so one of them adds it (and the z-loss's).
  Tensor d_scores;
  const bool adds_router_losses = s.aux && tp_->rank() == 0;
  if (adds_router_losses && s.aux->grad_scale() != 0.0)
    d_scores = Tensor::from_doubles(s.aux->expert_grad(r.rows_per_expert, r.tokens), {cfg_.num_experts},
                                    r.scores.dtype())
                   .to(dy.device());
  router_.backward(r, drow_weights, d_scores, s.x, dx, adds_router_losses ? s.aux->z_grad_scale() : 0.0);
  if (cfg_.bias_update) cfg_.bias_update->add_load(bias_index_, r.rows_per_expert);
  state.reset();
  return tp_->enter_backward(dx);
}

bool SparseMoE::drop_input(BlockState& state) {
  static_cast<Saved&>(state).x = Tensor();
  return true;
}

void SparseMoE::restore_input(const Tensor& x, BlockState& state) { static_cast<Saved&>(state).x = tp_->enter(x); }

BlockFactory sparse_moe(const SparseMoEConfig& cfg, ParallelContext& pc) {
  return [cfg, &pc](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<SparseMoE>(store, prefix, cfg, pc);
  };
}

}  // namespace bb
