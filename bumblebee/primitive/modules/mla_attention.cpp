// MLAttention forward and backward.
#include "bumblebee/primitive/modules/mla_attention.h"

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/parallel/ring_attention.h"

namespace bb {

namespace {
std::vector<int64_t> iota_columns(int64_t begin, int64_t count) { return block_columns(1, 0, begin, count); }

// The stored column of rope dim j in the rotate-half layout: HF's
// interleaved pairs (2i, 2i+1) become (i, i + R/2).
std::vector<int64_t> rope_columns(int64_t begin, int64_t rope_dim, bool interleave) {
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < rope_dim; ++j)
    idx.push_back(begin + (!interleave ? j : j < rope_dim / 2 ? 2 * j : 2 * (j - rope_dim / 2) + 1));
  return idx;
}

std::vector<int64_t> broadcast_columns(int64_t heads, int64_t dim) {
  std::vector<int64_t> idx;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < dim; ++j) idx.push_back(j);
  return idx;
}

int64_t local_heads(const MLAConfig& cfg, ParallelContext& pc) {
  BB_CHECK(cfg.num_heads % pc.tp().size() == 0, "num_attention_heads ", cfg.num_heads, " is not divisible by tp ",
           pc.tp().size());
  BB_CHECK(cfg.kv_lora_rank > 0 && cfg.qk_nope_head_dim > 0 && cfg.v_head_dim > 0,
           "multi-head latent attention needs kv_lora_rank, qk_nope_head_dim and v_head_dim > 0");
  BB_CHECK(cfg.qk_rope_head_dim > 0 && cfg.qk_rope_head_dim % 2 == 0,
           "multi-head latent attention needs an even qk_rope_head_dim > 0, got ", cfg.qk_rope_head_dim);
  return cfg.num_heads / pc.tp().size();
}
}  // namespace

MLAttention::MLAttention(ParamStore& store, const std::string& prefix, const MLAConfig& cfg, ParallelContext& pc,
                         const Tensor& inv_freq)
    : cfg_(cfg),
      tp_(&pc.tp()),
      cp_(&pc.cp()),
      heads_local_(local_heads(cfg, pc)),
      inv_freq_(inv_freq),
      sel_c_(cfg.kv_lora_rank + cfg.qk_rope_head_dim, iota_columns(0, cfg.kv_lora_rank)),
      sel_k_rope_(cfg.kv_lora_rank + cfg.qk_rope_head_dim,
                  rope_columns(cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.rope_interleave)),
      sel_q_rope_(cfg.qk_head_dim(), rope_columns(cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.rope_interleave)),
      att_nope_(cfg.qk_head_dim(), iota_columns(0, cfg.qk_nope_head_dim)),
      att_rope_(cfg.qk_head_dim(), iota_columns(cfg.qk_nope_head_dim, cfg.qk_rope_head_dim)),
      sel_k_nope_(cfg.qk_nope_head_dim + cfg.v_head_dim, iota_columns(0, cfg.qk_nope_head_dim)),
      sel_v_(cfg.qk_nope_head_dim + cfg.v_head_dim, iota_columns(cfg.qk_nope_head_dim, cfg.v_head_dim)),
      bcast_k_rope_(cfg.qk_rope_head_dim, broadcast_columns(heads_local_, cfg.qk_rope_head_dim)) {
  // Declared in HF's module order.
  const ShardInfo replicated{ShardKind::Replicated, pc.tp().rank(), pc.tp().size()};
  const int64_t q_out = cfg.num_heads * cfg.qk_head_dim();
  if (cfg.q_lora_rank > 0) {
    q_a_proj_ = &store.add(prefix + "q_a_proj.weight", {cfg.q_lora_rank, cfg.hidden}, replicated);
    q_a_layernorm_.emplace(store, prefix + "q_a_layernorm.weight", cfg.q_lora_rank, cfg.norm_eps);
    q_b_proj_.emplace(store, prefix + "q_b_proj.weight", cfg.q_lora_rank, q_out, pc.tp());
  } else {
    q_b_proj_.emplace(store, prefix + "q_proj.weight", cfg.hidden, q_out, pc.tp());
  }
  kv_a_proj_ = &store.add(prefix + "kv_a_proj_with_mqa.weight", {cfg.kv_lora_rank + cfg.qk_rope_head_dim, cfg.hidden},
                          replicated);
  kv_a_layernorm_.emplace(store, prefix + "kv_a_layernorm.weight", cfg.kv_lora_rank, cfg.norm_eps);
  kv_b_proj_.emplace(store, prefix + "kv_b_proj.weight", cfg.kv_lora_rank,
                     cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), pc.tp());
  o_proj_.emplace(store, prefix + "o_proj.weight", cfg.num_heads * cfg.v_head_dim, cfg.hidden, pc.tp());
}

Tensor MLAttention::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  const int64_t Hl = heads_local_, Dqk = cfg_.qk_head_dim(), R = cfg_.qk_rope_head_dim, Dv = cfg_.v_head_dim;
  s->x_full = tp_->enter(x);
  const int64_t T = s->x_full.size(0);
  Tensor q;
  if (q_a_proj_) {
    s->q_a_normed = q_a_layernorm_->forward(linear_forward(s->x_full, q_a_proj_->value), s->q_a_norm);
    q = q_b_proj_->forward(s->q_a_normed, seq.lora_dropout);
  } else {
    q = q_b_proj_->forward(s->x_full, seq.lora_dropout);
  }
  const Tensor kv_a = linear_forward(s->x_full, kv_a_proj_->value);
  s->c_normed = kv_a_layernorm_->forward(sel_c_.forward(kv_a), s->kv_a_norm);
  const Tensor kv_b = kv_b_proj_->forward(s->c_normed, seq.lora_dropout).view({T * Hl, cfg_.qk_nope_head_dim + Dv});

  const Tensor q_heads = q.view({T * Hl, Dqk});
  Tensor q_rope = sel_q_rope_.forward(q_heads);
  Tensor q_rope_heads = q_rope.view({T, Hl, R});
  ops::rope_forward(q_rope_heads, seq.position_ids, inv_freq_, q_rope_heads);
  Tensor k_rope = sel_k_rope_.forward(kv_a);
  Tensor k_rope_heads = k_rope.view({T, 1, R});
  ops::rope_forward(k_rope_heads, seq.position_ids, inv_freq_, k_rope_heads);
  if (cfg_.rope_scale != 1.0) {
    ops::scale_(q_rope, cfg_.rope_scale);
    ops::scale_(k_rope, cfg_.rope_scale);
  }
  // q = [q_nope | q_rope], k = [k_nope | k_rope] per head, joined by
  // scattering each part into its columns (the backward of the split).
  att_nope_.backward(att_nope_.forward(q_heads), s->q, false);
  att_rope_.backward(q_rope, s->q, true);
  att_nope_.backward(sel_k_nope_.forward(kv_b), s->k, false);
  att_rope_.backward(bcast_k_rope_.forward(k_rope).view({T * Hl, R}), s->k, true);
  s->q = s->q.view({T, Hl, Dqk});
  s->k = s->k.view({T, Hl, Dqk});
  s->v = sel_v_.forward(kv_b).view({T, Hl, Dv});

  s->out = Tensor::empty({T, Hl, Dv}, s->q.dtype(), s->q.device());
  s->lse = Tensor::empty({T, Hl}, stat_dtype(s->q.dtype()), s->q.device());
  if (cp_->size() > 1) {
    ring_attention_forward(s->q, s->k, s->v, {seq.cu_seqlens, seq.max_seqlen}, cfg_.softmax_scale, *cp_, s->out,
                           s->lse);
  } else {
    ops::attention_forward(s->q, s->k, s->v, seq.cu_seqlens, seq.max_seqlen, cfg_.softmax_scale, s->out, s->lse);
  }
  Tensor y = o_proj_->forward(s->out.view({T, Hl * Dv}), seq.lora_dropout);
  if (cfg_.recompute_norms) s->q_a_normed = s->c_normed = Tensor();
  state = std::move(s);
  return y;
}

Tensor MLAttention::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "MLAttention::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  const int64_t Hl = heads_local_, Dqk = cfg_.qk_head_dim(), R = cfg_.qk_rope_head_dim, Dv = cfg_.v_head_dim;
  const int64_t T = s.x_full.size(0);
  if (cfg_.recompute_norms) {
    if (q_a_proj_) s.q_a_normed = q_a_layernorm_->recompute(s.q_a_norm);
    s.c_normed = kv_a_layernorm_->recompute(s.kv_a_norm);
  }
  Tensor d_out = o_proj_->backward(dy, s.out.view({T, Hl * Dv}), seq.lora_dropout).view({T, Hl, Dv});
  Tensor dq = Tensor::empty(s.q.shape(), dy.dtype(), dy.device());
  Tensor dk = Tensor::empty(s.k.shape(), dy.dtype(), dy.device());
  Tensor dv = Tensor::empty(s.v.shape(), dy.dtype(), dy.device());
  if (cp_->size() > 1) {
    ring_attention_backward(d_out, s.q, s.k, s.v, s.out, s.lse, {seq.cu_seqlens, seq.max_seqlen}, cfg_.softmax_scale,
                            *cp_, dq, dk, dv);
  } else {
    ops::attention_backward(d_out, s.q, s.k, s.v, s.out, s.lse, seq.cu_seqlens, seq.max_seqlen, cfg_.softmax_scale,
                            dq, dk, dv);
  }
  const Tensor dq_heads = dq.view({T * Hl, Dqk}), dk_heads = dk.view({T * Hl, Dqk});

  // Through the rope parts: the shared k_rope sums its heads' gradients.
  Tensor dq_rope = att_rope_.forward(dq_heads);
  Tensor dk_rope;
  bcast_k_rope_.backward(att_rope_.forward(dk_heads).view({T, Hl * R}), dk_rope, false);
  if (cfg_.rope_scale != 1.0) {
    ops::scale_(dq_rope, cfg_.rope_scale);
    ops::scale_(dk_rope, cfg_.rope_scale);
  }
  Tensor dq_rope_heads = dq_rope.view({T, Hl, R}), dk_rope_heads = dk_rope.view({T, 1, R});
  ops::rope_backward(dq_rope_heads, seq.position_ids, inv_freq_, dq_rope_heads);
  ops::rope_backward(dk_rope_heads, seq.position_ids, inv_freq_, dk_rope_heads);

  // The compressed kv path: kv_b's [k_nope | v], its norm, kv_a's [c | k_rope].
  Tensor d_kv_b;
  sel_k_nope_.backward(att_nope_.forward(dk_heads), d_kv_b, false);
  sel_v_.backward(dv.view({T * Hl, Dv}), d_kv_b, true);
  Tensor d_c;
  kv_b_proj_->backward(d_kv_b.view({T, Hl * (cfg_.qk_nope_head_dim + Dv)}), s.c_normed, d_c, false, seq.lora_dropout);
  Tensor d_kv_a;
  sel_c_.backward(kv_a_layernorm_->backward(d_c, s.kv_a_norm), d_kv_a, false);
  sel_k_rope_.backward(dk_rope, d_kv_a, true);
  Tensor dx_full;
  linear_backward(d_kv_a, s.x_full, kv_a_proj_->value, kv_a_proj_->grad, dx_full, false, grad_write_beta(*kv_a_proj_));

  // The q path.
  Tensor d_q;
  att_nope_.backward(att_nope_.forward(dq_heads), d_q, false);
  sel_q_rope_.backward(dq_rope, d_q, true);
  d_q = d_q.view({T, Hl * Dqk});
  if (q_a_proj_) {
    Tensor d_q_a;
    q_b_proj_->backward(d_q, s.q_a_normed, d_q_a, false, seq.lora_dropout);
    linear_backward(q_a_layernorm_->backward(d_q_a, s.q_a_norm), s.x_full, q_a_proj_->value, q_a_proj_->grad,
                    dx_full, true, grad_write_beta(*q_a_proj_));
  } else {
    q_b_proj_->backward(d_q, s.x_full, dx_full, true, seq.lora_dropout);
  }
  state.reset();
  return tp_->enter_backward(dx_full);
}

bool MLAttention::drop_input(BlockState& state) {
  static_cast<Saved&>(state).x_full = Tensor();
  return true;
}

void MLAttention::restore_input(const Tensor& x, BlockState& state) {
  static_cast<Saved&>(state).x_full = tp_->enter(x);
}

BlockFactory mla_attention(const MLAConfig& cfg, ParallelContext& pc, const Tensor& inv_freq) {
  return [cfg, &pc, inv_freq](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<MLAttention>(store, prefix, cfg, pc, inv_freq);
  };
}

}  // namespace bb
