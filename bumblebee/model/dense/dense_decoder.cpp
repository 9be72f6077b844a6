// DenseDecoder construction, initialisation, forward and backward.
#include "bumblebee/model/dense/dense_decoder.h"

#include <functional>

#include "bumblebee/primitive/modules/parameter_init.h"

namespace bb {

struct DenseDecoder::State : ForwardState {
  VocabParallelEmbedding::Saved embed;
  std::vector<DecoderLayer::Saved> layers;
  RMSNorm::Saved norm;
  LMHead::Saved head;
};

DenseDecoder::DenseDecoder(const DenseConfig& cfg, const BuildContext& ctx)
    : cfg_(cfg), config_json_(cfg.to_json()), ctx_(ctx), tp_(ctx.parallel->tp()) {
  inv_freq_ = rope_inv_freq(cfg.rope, cfg.head_dim).to(ctx.device);
  embed_ = std::make_unique<VocabParallelEmbedding>(store_, "model.embed_tokens.weight", cfg.vocab_size,
                                                    cfg.hidden_size, tp_);
  DecoderLayerConfig lc;
  lc.attention = {cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.qk_norm, cfg.rms_norm_eps};
  BB_CHECK(cfg.intermediate_size % tp_.size() == 0, "intermediate_size ", cfg.intermediate_size,
           " is not divisible by tp ", tp_.size());
  lc.ffn = cfg.intermediate_size;
  lc.norm_eps = cfg.rms_norm_eps;
  lc.recompute = ctx.recompute;
  lc.attention.recompute_core_attention = ctx.recompute == Recompute::Selective;
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    layer_first_param_.push_back(store_.params().size());
    layers_.push_back(std::make_unique<DecoderLayer>(store_, "model.layers." + std::to_string(i) + ".", lc, tp_,
                                                     inv_freq_));
  }
  layer_first_param_.push_back(store_.params().size());
  norm_ = std::make_unique<RMSNorm>(store_, "model.norm.weight", cfg.hidden_size, cfg.rms_norm_eps);
  Parameter* head_weight = &embed_->weight();
  if (!cfg.tie_word_embeddings)
    head_weight = &store_.add("lm_head.weight", {cfg.vocab_size, cfg.hidden_size},
                              {ShardKind::Vocab, tp_.rank(), tp_.size()});
  head_ = std::make_unique<LMHead>(*head_weight, tp_, ctx.temperature);
  store_.allocate(ctx.dtype, ctx.grad_dtype, ctx.device, ctx.dp_pad, ctx.grad_bucket_size);
}

double DenseDecoder::train_flops(int64_t tokens, int64_t seq_len) const {
  // 6 N per token for every matrix a token passes through (the embedding
  // lookup is no matmul; a tied table counts once, for the LM head), plus
  // causal attention: QK^T and PV over half the seq_len^2 pairs, x3 for training.
  const double h = double(cfg_.hidden_size), q = double(cfg_.num_heads * cfg_.head_dim);
  const double kv = double(cfg_.num_kv_heads * cfg_.head_dim), f = double(cfg_.intermediate_size);
  const double per_layer = h * (q + 2 * kv) + q * h + 3 * h * f;
  const double n = double(cfg_.num_layers) * per_layer + double(cfg_.vocab_size) * h;
  const double attn = 6.0 * double(cfg_.num_layers) * double(seq_len) * q;   // per token: 3 x 2 x seq x q
  return double(tokens) * (6.0 * n + attn);
}

void DenseDecoder::init_weights(uint64_t seed) {
  // Each parameter draws from a generator keyed by its name, at the full
  // tensor's indices, so every tp layout initialises the same model.
  for (Parameter& p : store_.params()) {
    if (p.init == InitKind::Ones) {
      p.value.fill_(1.0);
      continue;
    }
    init_normal_shard(p, seed ^ std::hash<std::string>{}(p.name), cfg_.initializer_range);
  }
}

Tensor DenseDecoder::forward(const DeviceMicroBatch& mb, const Tensor& dloss, std::unique_ptr<ForwardState>& state) {
  auto st = std::make_unique<State>();
  st->layers.resize(layers_.size());
  Tensor x = embed_->forward(mb.input_ids, ctx_.residual_dtype, st->embed);
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->forward(x, mb.seq, st->layers[i]);
  Tensor h = norm_->forward(x, st->norm);
  Tensor loss = head_->forward(h, mb.labels, dloss, st->head);
  state = std::move(st);
  return loss;
}

void DenseDecoder::backward(const DeviceMicroBatch& mb, const Tensor& dloss, ForwardState& state,
                            const GradReadyFn& on_grad_ready) {
  State& st = static_cast<State&>(state);
  Tensor dx = norm_->backward(head_->backward(dloss, st.head), st.norm);
  st.head = LMHead::Saved{};
  // The final norm and an untied lm_head come after the layers; a tied head's
  // weight is the embedding's, which is done only after the embedding backward.
  grads_ready(layer_first_param_.back(), store_.params().size(), on_grad_ready);
  for (size_t i = layers_.size(); i-- > 0;) {
    dx = layers_[i]->backward(dx, mb.seq, st.layers[i]);
    grads_ready(layer_first_param_[i], layer_first_param_[i + 1], on_grad_ready);
  }
  embed_->backward(dx, st.embed);
  grads_ready(0, layer_first_param_.front(), on_grad_ready);
}

void DenseDecoder::grads_ready(size_t first, size_t end, const GradReadyFn& on_grad_ready) {
  if (!on_grad_ready) return;
  for (size_t i = first; i < end; ++i) {
    Parameter& p = store_.params()[i];
    if (p.replicated_over_tp()) tp_.reduce_replicated_grad(p.grad);
    on_grad_ready(p);
  }
}

Tensor DenseDecoder::logits(const DeviceMicroBatch& mb) {
  State st;
  st.layers.resize(layers_.size());
  Tensor x = embed_->forward(mb.input_ids, ctx_.residual_dtype, st.embed);
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = layers_[i]->forward(x, mb.seq, st.layers[i]);
    st.layers[i] = DecoderLayer::Saved{};
  }
  return head_->full_logits(norm_->forward(x, st.norm));
}

}  // namespace bb
