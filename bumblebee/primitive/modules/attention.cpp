// SelfAttention forward and backward.
#include "bumblebee/primitive/modules/attention.h"

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/parallel/ring_attention.h"

namespace bb {

namespace {
int64_t heads_per_rank(int64_t heads, int tp, const char* what) {
  BB_CHECK(heads % tp == 0, what, " ", heads, " is not divisible by tp ", tp);
  return heads / tp;
}
}  // namespace

SelfAttention::SelfAttention(ParamStore& store, const std::string& prefix, const AttentionConfig& cfg,
                             ParallelContext& pc, const Tensor& inv_freq)
    : cfg_(cfg),
      tp_(&pc.tp()),
      cp_(&pc.cp()),
      heads_local_(heads_per_rank(cfg.num_heads, pc.tp().size(), "num_attention_heads")),
      kv_heads_local_(heads_per_rank(cfg.num_kv_heads, pc.tp().size(), "num_key_value_heads")),
      q_proj_(store, prefix + "q_proj.weight", cfg.hidden, cfg.num_heads * cfg.head_dim, pc.tp()),
      k_proj_(store, prefix + "k_proj.weight", cfg.hidden, cfg.num_kv_heads * cfg.head_dim, pc.tp()),
      v_proj_(store, prefix + "v_proj.weight", cfg.hidden, cfg.num_kv_heads * cfg.head_dim, pc.tp()),
      o_proj_(store, prefix + "o_proj.weight", cfg.num_heads * cfg.head_dim, cfg.hidden, pc.tp()),
      inv_freq_(inv_freq) {
  BB_CHECK(cfg.num_heads % cfg.num_kv_heads == 0, "num_attention_heads ", cfg.num_heads,
           " is not divisible by num_key_value_heads ", cfg.num_kv_heads);
  if (cfg.qk_norm) {
    q_norm_.emplace(store, prefix + "q_norm.weight", cfg.head_dim, cfg.norm_eps);
    k_norm_.emplace(store, prefix + "k_norm.weight", cfg.head_dim, cfg.norm_eps);
  }
}

Tensor SelfAttention::forward(const Tensor& x, const SequenceLayout& seq, Saved& s) {
  const int64_t D = cfg_.head_dim;
  s.x_full = tp_->enter(x);
  const int64_t T = s.x_full.size(0);
  const Tensor q = q_proj_.forward(s.x_full, seq.lora_dropout).view({T, heads_local_, D});
  const Tensor k = k_proj_.forward(s.x_full, seq.lora_dropout).view({T, kv_heads_local_, D});
  s.v = v_proj_.forward(s.x_full, seq.lora_dropout).view({T, kv_heads_local_, D});
  rotate_qk(q, k, seq, s);
  core_attention(seq, s);
  Tensor y = o_proj_.forward(s.out.view({T, heads_local_ * D}), seq.lora_dropout);
  if (cfg_.recompute_core_attention) s.out = s.lse = Tensor();
  if (cfg_.recompute_qk_norm && cfg_.qk_norm) s.q = s.k = Tensor();
  return y;
}

// The attention's q and k from the projections: with qk_norm each head's
// norm and RoPE in one op (the norms keep the projections and rstd), else
// RoPE alone.
void SelfAttention::rotate_qk(const Tensor& q, const Tensor& k, const SequenceLayout& seq, Saved& s) const {
  if (cfg_.qk_norm) {
    s.q = q_norm_->forward_rope(q, seq.position_ids, inv_freq_, s.q_norm);
    s.k = k_norm_->forward_rope(k, seq.position_ids, inv_freq_, s.k_norm);
    return;
  }
  s.q = Tensor::empty(q.shape(), q.dtype(), q.device());
  s.k = Tensor::empty(k.shape(), k.dtype(), k.device());
  ops::rope_forward(q, seq.position_ids, inv_freq_, s.q);
  ops::rope_forward(k, seq.position_ids, inv_freq_, s.k);
}

// out and lse of q, k, v: plain causal attention, or ring attention over cp.
void SelfAttention::core_attention(const SequenceLayout& seq, Saved& s) {
  const int64_t T = s.q.size(0), D = cfg_.head_dim;
  s.out = Tensor::empty({T, heads_local_, D}, s.q.dtype(), s.q.device());
  s.lse = Tensor::empty({T, heads_local_}, stat_dtype(s.q.dtype()), s.q.device());
  const double scale = 1.0 / std::sqrt(double(D));
  if (cp_->size() > 1) {
    ring_attention_forward(s.q, s.k, s.v, {seq.cu_seqlens, seq.max_seqlen}, scale, *cp_, s.out, s.lse);
  } else {
    ops::attention_forward(s.q, s.k, s.v, seq.cu_seqlens, seq.max_seqlen, scale, s.out, s.lse);
  }
}

Tensor SelfAttention::backward(const Tensor& dy, const SequenceLayout& seq, Saved& s) {
  const int64_t D = cfg_.head_dim;
  const int64_t T = s.x_full.size(0);
  if (!s.q.defined()) {   // selective recompute of the q/k norms (with their RoPE)
    s.q = q_norm_->recompute_rope(s.q_norm, seq.position_ids, inv_freq_);
    s.k = k_norm_->recompute_rope(s.k_norm, seq.position_ids, inv_freq_);
  }
  if (!s.out.defined()) core_attention(seq, s);   // selective recompute of the core attention
  Tensor d_out = o_proj_.backward(dy, s.out.view({T, heads_local_ * D}), seq.lora_dropout).view({T, heads_local_, D});
  Tensor dq = Tensor::empty(s.q.shape(), dy.dtype(), dy.device());
  Tensor dk = Tensor::empty(s.k.shape(), dy.dtype(), dy.device());
  Tensor dv = Tensor::empty(s.v.shape(), dy.dtype(), dy.device());
  const double scale = 1.0 / std::sqrt(double(D));
  if (cp_->size() > 1) {
    ring_attention_backward(d_out, s.q, s.k, s.v, s.out, s.lse, {seq.cu_seqlens, seq.max_seqlen}, scale, *cp_, dq,
                            dk, dv);
  } else {
    ops::attention_backward(d_out, s.q, s.k, s.v, s.out, s.lse, seq.cu_seqlens, seq.max_seqlen, scale, dq, dk, dv);
  }
  if (cfg_.qk_norm) {
    dq = q_norm_->backward_rope(dq, s.q_norm, seq.position_ids, inv_freq_);
    dk = k_norm_->backward_rope(dk, s.k_norm, seq.position_ids, inv_freq_);
  } else {
    ops::rope_backward(dq, seq.position_ids, inv_freq_, dq);
    ops::rope_backward(dk, seq.position_ids, inv_freq_, dk);
  }
  Tensor dx_full;
  q_proj_.backward(dq.view({T, heads_local_ * D}), s.x_full, dx_full, false, seq.lora_dropout);
  k_proj_.backward(dk.view({T, kv_heads_local_ * D}), s.x_full, dx_full, true, seq.lora_dropout);
  v_proj_.backward(dv.view({T, kv_heads_local_ * D}), s.x_full, dx_full, true, seq.lora_dropout);
  return tp_->enter_backward(dx_full);
}

namespace {
class SelfAttentionBlock : public Block {
 public:
  struct State : BlockState {
    SelfAttention::Saved saved;
  };
  SelfAttentionBlock(ParamStore& store, const std::string& prefix, const AttentionConfig& cfg, ParallelContext& pc,
                     const Tensor& inv_freq)
      : attn_(store, prefix, cfg, pc, inv_freq) {}
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override {
    auto s = std::make_unique<State>();
    Tensor y = attn_.forward(x, seq, s->saved);
    state = std::move(s);
    return y;
  }
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override {
    BB_CHECK(state, "SelfAttention::backward without a saved forward");
    Tensor dx = attn_.backward(dy, seq, static_cast<State&>(*state).saved);
    state.reset();
    return dx;
  }
  bool drop_input(BlockState& state) override {
    attn_.drop_input(static_cast<State&>(state).saved);
    return true;
  }
  void restore_input(const Tensor& x, BlockState& state) override {
    attn_.restore_input(x, static_cast<State&>(state).saved);
  }

 private:
  SelfAttention attn_;
};
}  // namespace

BlockFactory self_attention(const AttentionConfig& cfg, ParallelContext& pc, const Tensor& inv_freq) {
  return [cfg, &pc, inv_freq](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<SelfAttentionBlock>(store, prefix, cfg, pc, inv_freq);
  };
}

}  // namespace bb
