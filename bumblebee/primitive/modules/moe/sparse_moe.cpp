// SparseMoE forward and backward: routing, permutation, the grouped experts.
#include "bumblebee/primitive/modules/moe/sparse_moe.h"

#include <algorithm>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

namespace bb {

SparseMoE::SparseMoE(ParamStore& store, const std::string& prefix, const SparseMoEConfig& cfg, ParallelContext& pc)
    : cfg_(cfg),
      router_(store, prefix + "gate.weight", {cfg.hidden, cfg.num_experts, cfg.top_k, cfg.norm_topk_prob}) {
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
  s->routing = router_.forward(x);
  const Routing& r = s->routing;
  const int64_t k = r.top_k, e_count = cfg_.num_experts;

  // Rows sorted by expert; within an expert by top-k slot, then token (HF's order).
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(e_count));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < r.tokens; ++t) rows_of[size_t(r.experts[size_t(t * k + j)])].push_back(t * k + j);
  std::vector<int64_t>& token_of_row = s->row_token;
  std::vector<double> row_weight;
  std::vector<int64_t> rows_per_expert;
  for (const auto& rows : rows_of) {
    for (int64_t tk : rows) {
      token_of_row.push_back(tk / k);
      s->row_slot.push_back(tk % k);
      row_weight.push_back(r.weights[size_t(tk)]);
    }
    rows_per_expert.push_back(int64_t(rows.size()));
  }
  const int64_t n = int64_t(token_of_row.size());
  s->token_of_row = Tensor::from_vector<int64_t>(token_of_row, {n}).to(x.device());
  s->row_weights = Tensor::from_doubles(row_weight, {n}, x.dtype()).to(x.device());
  s->x_perm = Tensor::empty({n, cfg_.hidden}, x.dtype(), x.device());
  ops::moe_permute(x, s->token_of_row, s->x_perm);
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
  ops::moe_unpermute(s->y_perm, s->token_of_row, s->row_weights, y);

  // The auxiliary loss's P are the router probabilities (HF applies the
  // softmax to the router logits once more, in load_balancing_loss_func).
  // A recomputed forward finds the accumulator finished and adds nothing.
  s->aux = seq.router_aux;
  if (s->aux) s->aux->add_layer(r.probs, r.experts, r.tokens, e_count);
  state = std::move(s);
  return y;
}

Tensor SparseMoE::backward(const Tensor& dy, const SequenceLayout&, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "SparseMoE::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  const Routing& r = s.routing;
  const int64_t n = s.x_perm.size(0), e_count = cfg_.num_experts;
  Tensor dy_perm = Tensor::empty({n, cfg_.hidden}, dy.dtype(), dy.device());
  Tensor drow_weights = Tensor::empty({n}, dy.dtype(), dy.device());
  ops::moe_unpermute_backward(dy, s.y_perm, s.token_of_row, s.row_weights, dy_perm, drow_weights);

  // dispatch and combine are each other's adjoints: the output gradient goes
  // out like the input rows did, the input gradient comes back like the output.
  const Tensor dy_experts = dispatcher_ ? dispatcher_->dispatch(s.plan, dy_perm) : dy_perm;
  const Tensor dx_experts = experts_->backward(dy_experts, s.experts);
  const Tensor dx_perm = dispatcher_ ? dispatcher_->combine(s.plan, dx_experts) : dx_experts;
  Tensor dx = Tensor::empty(s.x.shape(), dy.dtype(), dy.device());
  ops::moe_permute_backward(dx_perm, s.token_of_row, dx);

  // Routing weights' gradients back to [T, k] (row i is token t's slot j).
  const std::vector<double> drw = drow_weights.to_doubles();
  std::vector<double> d_weights(size_t(r.tokens * r.top_k), 0.0);
  for (int64_t i = 0; i < n; ++i)
    d_weights[size_t(s.row_token[size_t(i)] * r.top_k + s.row_slot[size_t(i)])] = drw[size_t(i)];
  // The auxiliary loss through P: the same gradient for every token's probabilities.
  std::vector<double> d_probs;
  if (s.aux && s.aux->grad_scale() != 0.0) {
    const std::vector<double> g = s.aux->expert_grad();
    d_probs.resize(r.probs.size());
    for (int64_t t = 0; t < r.tokens; ++t) std::copy(g.begin(), g.end(), d_probs.begin() + t * e_count);
  }
  router_.backward(r, d_weights, d_probs, s.x, dx);
  state.reset();
  return dx;
}

BlockFactory sparse_moe(const SparseMoEConfig& cfg, ParallelContext& pc) {
  return [cfg, &pc](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<SparseMoE>(store, prefix, cfg, pc);
  };
}

}  // namespace bb
