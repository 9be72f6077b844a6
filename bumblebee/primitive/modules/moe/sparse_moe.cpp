// SparseMoE forward and backward: routing, permutation, the grouped experts.
#include "bumblebee/primitive/modules/moe/sparse_moe.h"

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/moe/expert_capacity.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"
#include "bumblebee/primitive/modules/moe/router_replay.h"

namespace bb {

SparseMoE::SparseMoE(ParamStore& store, const std::string& prefix, const SparseMoEConfig& cfg, ParallelContext& pc)
    : cfg_(cfg),
      router_(store, prefix + "gate.",
              {cfg.hidden, cfg.num_experts,
               {cfg.score, cfg.top_k, cfg.norm_topk_prob, cfg.num_groups, cfg.topk_groups, cfg.routed_scaling_factor}}) {
  BB_CHECK(pc.tp().size() == 1, "MoE layers do not support tensor parallelism yet (backend.parallel.tp = ",
           pc.tp().size(), "); run with tp = 1");
  int64_t first = 0, local = cfg.num_experts;
  if (pc.ep().size() > 1) {
    dispatcher_.emplace(pc.ep(), cfg.num_experts);
    first = dispatcher_->first_local_expert();
    local = dispatcher_->local_experts();
  }
  experts_.emplace(store, prefix + "experts.", first, local, cfg.hidden, cfg.moe_ffn, cfg.recompute_activation);
}

Tensor SparseMoE::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  s->x = x;
  s->aux = seq.router_aux;
  const bool z_loss = s->aux && s->aux->config().z_coeff != 0.0;
  RouterReplay* replay = seq.router_replay;
  const bool replaying = replay && replay->mode() == RouterReplayMode::Replay;
  s->routing = router_.forward(x, replaying ? replay->forced_experts(cfg_.moe_index, x.size(0), x.device()) : Tensor(),
                               z_loss);
  if (replay && replay->mode() == RouterReplayMode::Record) replay->record(cfg_.moe_index, s->routing.experts);
  Routing& r = s->routing;
  const std::vector<int64_t>& rows_per_expert = r.rows_per_expert;
  const int64_t n = r.token_of_row.size(0);
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
  s->x_perm = Tensor::empty({n, cfg_.hidden}, x.dtype(), x.device());
  ops::moe_permute(x, r.token_of_row, s->x_perm);
  if (dispatcher_) {
    s->plan = dispatcher_->plan(rows_per_expert);
    s->offsets = s->plan.local_offsets;
    s->x_experts = dispatcher_->dispatch(s->plan, s->x_perm);
  } else {
    s->offsets.assign(1, 0);
    for (int64_t c : rows_per_expert) s->offsets.push_back(s->offsets.back() + c);
    s->x_experts = s->x_perm;
  }
  const Tensor y_experts = experts_->forward(s->x_experts, s->offsets, s->experts);
  s->y_perm = dispatcher_ ? dispatcher_->combine(s->plan, y_experts) : y_experts;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::moe_unpermute(s->y_perm, r.token_of_row, r.row_weights, y);

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
  return y;
}

Tensor SparseMoE::backward(const Tensor& dy, const SequenceLayout&, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "SparseMoE::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  const Routing& r = s.routing;
  const int64_t n = s.x_perm.size(0);
  Tensor dy_perm = Tensor::empty({n, cfg_.hidden}, dy.dtype(), dy.device());
  Tensor drow_weights = Tensor::empty({n}, r.row_weights.dtype(), dy.device());
  ops::moe_unpermute_backward(dy, s.y_perm, r.token_of_row, r.row_weights, dy_perm, drow_weights);
  if (s.row_keep.defined()) {   // a dropped row's weight is a constant 0
    Tensor kept = Tensor::empty({n}, drow_weights.dtype(), dy.device());
    ops::mul(drow_weights, s.row_keep, kept);
    drow_weights = kept;
  }

  // dispatch and combine are each other's adjoints: the output gradient goes
  // out like the input rows did, the input gradient comes back like the output.
  const Tensor dy_experts = dispatcher_ ? dispatcher_->dispatch(s.plan, dy_perm) : dy_perm;
  const Tensor dx_experts = experts_->backward(dy_experts, s.experts);
  const Tensor dx_perm = dispatcher_ ? dispatcher_->combine(s.plan, dx_experts) : dx_experts;
  Tensor dx = Tensor::empty(s.x.shape(), dy.dtype(), dy.device());
  ops::moe_permute_backward(dx_perm, r.token_of_row, dx);

  // The auxiliary loss through P: the same gradient [E] for every token's scores.
  Tensor d_scores;
  if (s.aux && s.aux->grad_scale() != 0.0)
    d_scores = Tensor::from_doubles(s.aux->expert_grad(r.rows_per_expert, r.tokens), {cfg_.num_experts},
                                    r.scores.dtype())
                   .to(dy.device());
  router_.backward(r, drow_weights, d_scores, s.x, dx, s.aux ? s.aux->z_grad_scale() : 0.0);
  state.reset();
  return dx;
}

BlockFactory sparse_moe(const SparseMoEConfig& cfg, ParallelContext& pc) {
  return [cfg, &pc](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<SparseMoE>(store, prefix, cfg, pc);
  };
}

}  // namespace bb
