// DecoderLayer forward, backward and full-layer recompute.
#include "bumblebee/primitive/modules/decoder_layer.h"

#include "bumblebee/ops/ops.h"

namespace bb {

Recompute recompute_from_name(const std::string& name) {
  if (name == "none" || name.empty()) return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  BB_FAIL("unknown recompute mode '", name, "' (expected none, selective or full)");
}

DecoderLayer::DecoderLayer(ParamStore& store, const std::string& prefix, const DecoderLayerConfig& cfg,
                           TensorParallel& tp, const Tensor& inv_freq)
    : cfg_(cfg),
      input_layernorm_(store, prefix + "input_layernorm.weight", cfg.attention.hidden, cfg.norm_eps),
      self_attn_(store, prefix + "self_attn.", cfg.attention, tp, inv_freq),
      post_attention_layernorm_(store, prefix + "post_attention_layernorm.weight", cfg.attention.hidden,
                                cfg.norm_eps),
      mlp_(store, prefix + "mlp.", cfg.attention.hidden, cfg.ffn, tp) {}

Tensor DecoderLayer::run_forward(const Tensor& x, const SequenceLayout& seq, Saved& s) {
  s.norm1 = std::make_unique<RMSNorm::Saved>();
  s.norm2 = std::make_unique<RMSNorm::Saved>();
  s.attn = std::make_unique<SelfAttention::Saved>();
  s.mlp = std::make_unique<SwiGLUMLP::Saved>();
  Tensor a = self_attn_.forward(input_layernorm_.forward(x, *s.norm1), seq, *s.attn);
  Tensor h = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::add(x, a, h);
  Tensor m = mlp_.forward(post_attention_layernorm_.forward(h, *s.norm2), *s.mlp);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::add(h, m, out);
  return out;
}

Tensor DecoderLayer::forward(const Tensor& x, const SequenceLayout& seq, Saved& s) {
  s.x = x;
  Tensor out = run_forward(x, seq, s);
  if (cfg_.recompute == Recompute::Full) {
    s.norm1.reset();
    s.norm2.reset();
    s.attn.reset();
    s.mlp.reset();
  }
  return out;
}

Tensor DecoderLayer::backward(const Tensor& dy, const SequenceLayout& seq, Saved& s) {
  if (!s.attn) run_forward(s.x, seq, s);
  // dh = dy + norm2'(mlp'(dy));  dx = dh + norm1'(attn'(dh)). Each branch
  // takes the residual gradient in the dtype its output had (bfloat16 under
  // a float32 residual stream; to() is free when the dtypes agree).
  const DType act = post_attention_layernorm_.out_dtype();
  Tensor dh = post_attention_layernorm_.backward(mlp_.backward(dy.to(act), *s.mlp), *s.norm2);
  ops::add_(dh, dy);
  Tensor dx = input_layernorm_.backward(self_attn_.backward(dh.to(act), seq, *s.attn), *s.norm1);
  ops::add_(dx, dh);
  s = Saved{};
  return dx;
}

}  // namespace bb
