// SelfAttention block: q/k/v column-parallel projections, optional per-head
// q/k RMSNorm (Qwen3) and rotary embedding (one op where both apply), causal
// GQA attention over packed sequences, and the row-parallel output
// projection.
//
// The q, k and v weights are adjacent in the parameter store (one fused
// operand, as SwiGLUMLP's gate|up), so the projections run as one GEMM into
// qkv [T, Hq + 2 Hkv, D] (this rank's heads) and backward as one dgrad and
// one wgrad GEMM from one d_qkv. The norms and RoPE read q and k out of qkv
// and write dq and dk into d_qkv through the row stride (ops::HeadsView);
// attention takes contiguous tensors, so v is copied out and dv in.
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
  // q and k are the attention's (after norm and RoPE), v a copy of qkv's v
  // heads; with qk_norm the whole qkv is kept once, as the norms' input.
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
  ParamStore* store_;
  ColumnParallelLinear q_proj_, k_proj_, v_proj_;
  RowParallelLinear o_proj_;
  std::optional<RMSNorm> q_norm_, k_norm_;
  Tensor inv_freq_;

  // The fused q|k|v operand: this rank's rows of the three weights.
  Tensor qkv_weight() { return store_->fused_value(q_proj_.weight(), v_proj_.weight()); }
  void rotate_qk(const Tensor& qkv, const SequenceLayout& seq, Saved& s) const;
  void core_attention(const SequenceLayout& seq, Saved& s);
};

// A decoder layer's attention slot filled with SelfAttention (a Block whose
// state holds SelfAttention::Saved).
BlockFactory self_attention(const AttentionConfig& cfg, ParallelContext& pc, const Tensor& inv_freq);

}  // namespace bb
