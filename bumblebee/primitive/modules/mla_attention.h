// Multi-head latent attention (DeepSeek-V2/V3, HF's DeepseekV3Attention), a
// Block that fills a decoder layer's attention slot:
//   q  = q_b_proj(q_a_layernorm(q_a_proj(x)))    (q_lora_rank > 0; else q_proj(x))
//        per head [q_nope | q_rope]
//   kv = kv_a_proj_with_mqa(x) = [c (kv_lora_rank) | k_rope (qk_rope_head_dim, one for all heads)]
//   kv_b_proj(kv_a_layernorm(c)) per head [k_nope | v]
//   rope on q_rope and k_rope only; q = [q_nope | q_rope], k = [k_nope | k_rope]
//   causal attention with softmax scale `softmax_scale`, o_proj over the heads' v outputs.
// With `rope_interleave` (HF's default for DeepSeek-V3) the rope dims are
// stored as interleaved pairs (2i, 2i+1); they are first de-interleaved into
// the rotate-half layout ops::rope_forward applies, as HF's
// apply_rotary_pos_emb_interleave does. Yarn scales cos and sin by its
// attention factor (`rope_scale`); the softmax scale carries mscale^2.
//
// Tensor parallelism: heads are split over tp, so q_b_proj (or q_proj) and
// kv_b_proj are column-parallel (each head's rows are contiguous) and o_proj
// row-parallel; q_a_proj, kv_a_proj_with_mqa and both norms are replicated
// and applied to the tp group's tokens on every rank (their gradients are
// partial per rank, summed over tp with the other replicated parameters).
// Context parallelism: the tokens are split over cp in zigzag order as for
// SelfAttention (seq.cu_seqlens then holds one half's offsets, and
// seq.position_ids the global positions rope needs), everything but the core
// attention is per token, and the core attention is ring attention
// (parallel/ring_attention.h), whose K/V carry the v head dim of their own.
// Column splits and joins are ColumnSelect column copies (column_select.h).
#pragma once

#include <optional>
#include <string>

#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/column_select.h"
#include "bumblebee/primitive/modules/linear.h"
#include "bumblebee/primitive/modules/rmsnorm.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

struct MLAConfig {
  int64_t hidden = 0, num_heads = 0;
  int64_t q_lora_rank = 0;   // 0: q_proj, no low-rank q path
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  double norm_eps = 1e-6;
  double softmax_scale = 0.0;   // (qk_nope + qk_rope)^-1/2 x mscale^2
  double rope_scale = 1.0;      // yarn's attention factor on cos and sin
  bool rope_interleave = true;
  // Selective recompute's `layernorm` module: q_a_layernorm's and
  // kv_a_layernorm's outputs are dropped after forward and rebuilt in
  // backward from their kept inputs.
  bool recompute_norms = false;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

class MLAttention : public Block {
 public:
  struct Saved : BlockState {
    Tensor x_full, q_a_normed, c_normed, q, k, v, out, lse;
    RMSNorm::Saved q_a_norm, kv_a_norm;
  };
  // `inv_freq` [qk_rope_head_dim / 2] on the compute device.
  MLAttention(ParamStore& store, const std::string& prefix, const MLAConfig& cfg, ParallelContext& pc,
              const Tensor& inv_freq);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  bool drop_input(BlockState& state) override;   // x_full
  void restore_input(const Tensor& x, BlockState& state) override;

 private:
  MLAConfig cfg_;
  TensorParallel* tp_;
  dist::Communicator* cp_;
  int64_t heads_local_;
  Parameter* q_a_proj_ = nullptr;
  std::optional<RMSNorm> q_a_layernorm_;
  std::optional<ColumnParallelLinear> q_b_proj_;   // q_proj when q_lora_rank = 0
  Parameter* kv_a_proj_ = nullptr;
  std::optional<RMSNorm> kv_a_layernorm_;
  std::optional<ColumnParallelLinear> kv_b_proj_;
  std::optional<RowParallelLinear> o_proj_;
  Tensor inv_freq_;
  // kv_a's [c | k_rope] (k_rope de-interleaved); q's rope part (de-interleaved); the
  // attention layout's [nope | rope] per head (its backward joins them); kv_b's
  // per-head [k_nope | v]; k_rope to every local head.
  ColumnSelect sel_c_, sel_k_rope_, sel_q_rope_, att_nope_, att_rope_, sel_k_nope_, sel_v_, bcast_k_rope_;
};

// The attention slot filled with an MLAttention block.
BlockFactory mla_attention(const MLAConfig& cfg, ParallelContext& pc, const Tensor& inv_freq);

}  // namespace bb
