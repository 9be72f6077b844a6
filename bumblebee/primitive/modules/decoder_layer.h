// Pre-norm transformer decoder layer (Llama / Qwen3 / Qwen3-MoE):
//   h = x + attn(norm1(x));  out = h + ffn(norm2(h))
// The add into h runs in norm2's op (RMSNorm::forward_add), and each norm's
// backward adds the residual gradient that flows past it in its own op.
// The attention slot is any Block too (SelfAttention through
// `self_attention`, or multi-head latent attention), and so is the
// feed-forward slot `ffn`: a dense SwiGLU MLP, or a mixture of experts. Recompute of the whole layer is the
// Recompute wrapper (primitive/recompute) around it; selective recompute re-runs
// the core attention kernel (AttentionConfig::recompute_core_attention), the
// SwiGLU activation (the MLP's), and with `recompute_norms` (the `layernorm`
// module) the two norms: their outputs, the attention's and the
// feed-forward's inputs, are dropped by those blocks (Block::drop_input) and
// rebuilt in backward from the norms' saved inputs.
#pragma once

#include <memory>
#include <string>

#include "bumblebee/primitive/modules/attention.h"
#include "bumblebee/primitive/modules/block.h"

namespace bb {

struct DecoderLayerConfig {
  AttentionConfig attention;
  double norm_eps = 1e-6;
  bool recompute_norms = false;   // selective recompute's `layernorm` module
};

class DecoderLayer : public Block {
 public:
  struct Saved : BlockState {
    RMSNorm::Saved norm1, norm2;
    std::unique_ptr<BlockState> attn, ffn;
    bool attn_input_dropped = false, ffn_input_dropped = false;   // recompute_norms: rebuild before backward
  };
  DecoderLayer(ParamStore& store, const std::string& prefix, const DecoderLayerConfig& cfg, ParallelContext& pc,
               const Tensor& inv_freq, const BlockFactory& ffn);
  // Any attention block; `hidden` is the residual width the norms act on.
  DecoderLayer(ParamStore& store, const std::string& prefix, int64_t hidden, double norm_eps,
               const BlockFactory& attention, const BlockFactory& ffn, bool recompute_norms = false);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;

 private:
  RMSNorm input_layernorm_;
  std::unique_ptr<Block> self_attn_;
  RMSNorm post_attention_layernorm_;
  std::unique_ptr<Block> mlp_;
  bool recompute_norms_;
};

}  // namespace bb
