// Pre-norm transformer decoder layer (Llama / Qwen3 / Qwen3-MoE):
//   h = x + attn(norm1(x));  out = h + ffn(norm2(h))
// The attention slot is any Block too (SelfAttention through
// `self_attention`, or multi-head latent attention), and so is the
// feed-forward slot `ffn`: a dense SwiGLU MLP, or a mixture of experts. Recompute of the whole layer is the
// Recompute wrapper (primitive/recompute) around it; selective recompute re-runs
// only the core attention kernel (AttentionConfig::recompute_core_attention).
#pragma once

#include <memory>
#include <string>

#include "bumblebee/primitive/modules/attention.h"
#include "bumblebee/primitive/modules/block.h"

namespace bb {

struct DecoderLayerConfig {
  AttentionConfig attention;
  double norm_eps = 1e-6;
};

class DecoderLayer : public Block {
 public:
  struct Saved : BlockState {
    RMSNorm::Saved norm1, norm2;
    std::unique_ptr<BlockState> attn, ffn;
  };
  DecoderLayer(ParamStore& store, const std::string& prefix, const DecoderLayerConfig& cfg, ParallelContext& pc,
               const Tensor& inv_freq, const BlockFactory& ffn);
  // Any attention block; `hidden` is the residual width the norms act on.
  DecoderLayer(ParamStore& store, const std::string& prefix, int64_t hidden, double norm_eps,
               const BlockFactory& attention, const BlockFactory& ffn);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;

 private:
  RMSNorm input_layernorm_;
  std::unique_ptr<Block> self_attn_;
  RMSNorm post_attention_layernorm_;
  std::unique_ptr<Block> mlp_;
};

}  // namespace bb
