// Pre-norm transformer decoder layer (Llama / Qwen3 dense):
//   h = x + attn(norm1(x));  out = h + mlp(norm2(h))
// With recompute=Full the layer keeps only its input and re-runs its forward
// during backward, trading one extra forward for the activation memory;
// recompute=Selective re-runs only the core attention kernel.
#pragma once

#include <memory>
#include <string>

#include "bumblebee/primitive/modules/attention.h"
#include "bumblebee/primitive/modules/mlp.h"

namespace bb {

enum class Recompute { None, Selective, Full };
Recompute recompute_from_name(const std::string& name);   // "none" | "selective" | "full"

struct DecoderLayerConfig {
  AttentionConfig attention;
  int64_t ffn = 0;
  double norm_eps = 1e-6;
  Recompute recompute = Recompute::None;
};

class DecoderLayer {
 public:
  struct Saved {
    Tensor x;
    std::unique_ptr<RMSNorm::Saved> norm1, norm2;
    std::unique_ptr<SelfAttention::Saved> attn;
    std::unique_ptr<SwiGLUMLP::Saved> mlp;
  };
  DecoderLayer(ParamStore& store, const std::string& prefix, const DecoderLayerConfig& cfg, TensorParallel& tp,
               const Tensor& inv_freq);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, Saved& s);
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, Saved& s);

 private:
  Tensor run_forward(const Tensor& x, const SequenceLayout& seq, Saved& s);
  DecoderLayerConfig cfg_;
  RMSNorm input_layernorm_;
  SelfAttention self_attn_;
  RMSNorm post_attention_layernorm_;
  SwiGLUMLP mlp_;
};

}  // namespace bb
