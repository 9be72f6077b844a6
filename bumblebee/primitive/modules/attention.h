// SelfAttention block: q/k/v column-parallel projections, optional per-head
// q/k RMSNorm (Qwen3) and rotary embedding (one op where both apply), causal
// GQA attention over packed sequences, and the row-parallel output
// projection.
//
// Heads are split over tp ranks: rank r holds query heads [r*Hq/tp, ...) and
// the kv heads they read, so GQA groups never straddle ranks. With cp > 1 the
// tokens are zigzag chunks of every sequence and the core attention is ring
// attention over the cp group (primitive/parallel/ring_attention.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/linear.h"
#include "bumblebee/primitive/modules/rmsnorm.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

struct AttentionConfig {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  bool qk_norm = false;
  double norm_eps = 1e-6;
  // Selective recompute: keep q, k, v but not the core attention output and
  // its log-sum-exp; backward re-runs the attention kernel to get them.
  bool recompute_core_attention = false;
  // Selective recompute's `layernorm` module, with qk_norm: keep q and k
  // before their norms (the norms' saved inputs) but not after norm and
  // RoPE; backward re-runs the fused norm and RoPE to rebuild the
  // attention's q and k.
  bool recompute_qk_norm = false;
};

class SelfAttention {
 public:
  // q and k are the attention's (after norm and RoPE); with qk_norm the
  // projections' outputs are kept once, as the norms' inputs.
  struct Saved {
    Tensor x_full, q, k, v, out, lse;
    RMSNorm::Saved q_norm, k_norm;
  };
  SelfAttention(ParamStore& store, const std::string& prefix, const AttentionConfig& cfg, ParallelContext& pc,
                const Tensor& inv_freq);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, Saved& s);
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, Saved& s);
  // Block::drop_input / restore_input for the attention's input x.
  void drop_input(Saved& s) const { s.x_full = Tensor(); }
  void restore_input(const Tensor& x, Saved& s) const { s.x_full = tp_->enter(x); }

 private:
  AttentionConfig cfg_;
  TensorParallel* tp_;
  dist::Communicator* cp_;
  int64_t heads_local_, kv_heads_local_;
  ColumnParallelLinear q_proj_, k_proj_, v_proj_;
  RowParallelLinear o_proj_;
  std::optional<RMSNorm> q_norm_, k_norm_;
  Tensor inv_freq_;

  void rotate_qk(const Tensor& q, const Tensor& k, const SequenceLayout& seq, Saved& s) const;
  void core_attention(const SequenceLayout& seq, Saved& s);
};

// A decoder layer's attention slot filled with SelfAttention (a Block whose
// state holds SelfAttention::Saved).
BlockFactory self_attention(const AttentionConfig& cfg, ParallelContext& pc, const Tensor& inv_freq);

}  // namespace bb
