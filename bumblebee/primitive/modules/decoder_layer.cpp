// DecoderLayer forward and backward.
#include "bumblebee/primitive/modules/decoder_layer.h"

#include "bumblebee/ops/ops.h"

namespace bb {

DecoderLayer::DecoderLayer(ParamStore& store, const std::string& prefix, const DecoderLayerConfig& cfg,
                           ParallelContext& pc, const Tensor& inv_freq, const BlockFactory& ffn)
    : DecoderLayer(store, prefix, cfg.attention.hidden, cfg.norm_eps, self_attention(cfg.attention, pc, inv_freq),
                   ffn, cfg.recompute_norms) {}

DecoderLayer::DecoderLayer(ParamStore& store, const std::string& prefix, int64_t hidden, double norm_eps,
                           const BlockFactory& attention, const BlockFactory& ffn, bool recompute_norms)
    : input_layernorm_(store, prefix + "input_layernorm.weight", hidden, norm_eps),
      self_attn_(attention(store, prefix + "self_attn.")),
      post_attention_layernorm_(store, prefix + "post_attention_layernorm.weight", hidden, norm_eps),
      mlp_(ffn(store, prefix + "mlp.")),
      recompute_norms_(recompute_norms) {}

Tensor DecoderLayer::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  Tensor a = self_attn_->forward(input_layernorm_.forward(x, s->norm1), seq, s->attn);
  if (recompute_norms_) s->attn_input_dropped = self_attn_->drop_input(*s->attn);
  // h = x + a and its norm in one op: the residual add writes h once and the
  // norm does not read it back.
  Tensor h = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor m = mlp_->forward(post_attention_layernorm_.forward_add(x, a, h, s->norm2), seq, s->ffn);
  if (recompute_norms_) s->ffn_input_dropped = mlp_->drop_input(*s->ffn);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::add(h, m, out);
  state = std::move(s);
  return out;
}

Tensor DecoderLayer::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "DecoderLayer::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  // dh = dy + norm2'(ffn'(dy));  dx = dh + norm1'(attn'(dh)), each norm's
  // backward adding the residual gradient in its own op. Each branch takes
  // the residual gradient in the dtype its output had (bfloat16 under a
  // float32 residual stream; to() is free when the dtypes agree).
  const DType act = post_attention_layernorm_.out_dtype();
  if (s.ffn_input_dropped) mlp_->restore_input(post_attention_layernorm_.recompute(s.norm2).view(dy.shape()), *s.ffn);
  Tensor dh = post_attention_layernorm_.backward(mlp_->backward(dy.to(act), seq, s.ffn), s.norm2, dy);
  if (s.attn_input_dropped)
    self_attn_->restore_input(input_layernorm_.recompute(s.norm1).view(dy.shape()), *s.attn);
  Tensor dx = input_layernorm_.backward(self_attn_->backward(dh.to(act), seq, s.attn), s.norm1, dh);
  state.reset();
  return dx;
}

}  // namespace bb
