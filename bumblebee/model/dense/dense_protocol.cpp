// DenseProtocol: config parsing, construction from primitives, weights.
#include "bumblebee/model/dense/dense_protocol.h"

#include "bumblebee/model/decoder/decoder.h"
#include "bumblebee/model/dense/dense_checkpoint.h"
#include "bumblebee/primitive/modules/decoder_layer.h"
#include "bumblebee/primitive/modules/mlp.h"

namespace bb {

nlohmann::json DenseProtocol::build_model_config(const nlohmann::json& hf_config,
                                                 const nlohmann::json& overrides) const {
  return parse_dense_hf_config(hf_config, qk_norm_, overrides).to_json();
}

double dense_train_flops(const DenseConfig& cfg, int64_t tokens, int64_t seq_len) {
  // 6 N per token for every matrix a token passes through (the embedding
  // lookup is no matmul; a tied table counts once, for the LM head), plus
  // causal attention: QK^T and PV over half the seq_len^2 pairs, x3 for training.
  const double h = double(cfg.hidden_size), q = double(cfg.num_heads * cfg.head_dim);
  const double kv = double(cfg.num_kv_heads * cfg.head_dim), f = double(cfg.intermediate_size);
  const double per_layer = h * (q + 2 * kv) + q * h + 3 * h * f;
  const double n = double(cfg.num_layers) * per_layer + double(cfg.vocab_size) * h;
  const double attn = 6.0 * double(cfg.num_layers) * double(seq_len) * q;   // per token: 3 x 2 x seq x q
  return double(tokens) * (6.0 * n + attn);
}

DecoderSpec dense_decoder_spec(const DenseConfig& d, nlohmann::json config) {
  DecoderSpec spec;
  spec.config = std::move(config);
  spec.vocab_size = d.vocab_size;
  spec.hidden_size = d.hidden_size;
  spec.num_layers = d.num_layers;
  spec.norm_eps = d.rms_norm_eps;
  spec.initializer_range = d.initializer_range;
  spec.tie_word_embeddings = d.tie_word_embeddings;
  return spec;
}

std::unique_ptr<ModelChunk> DenseProtocol::build_model(const nlohmann::json& model_config,
                                                       const BuildContext& ctx) const {
  for (const auto& [k, v] : ctx.impl_cfg.items()) BB_FAIL("unknown impl_cfg key '", k, "' for dense models");
  const DenseConfig cfg = DenseConfig::from_json(model_config);
  ParallelContext& pc = *ctx.parallel;
  DecoderLayerConfig lc;
  lc.attention = {cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.qk_norm, cfg.rms_norm_eps};
  lc.norm_eps = cfg.rms_norm_eps;
  const Tensor inv_freq = rope_inv_freq(cfg.rope, cfg.head_dim).to(ctx.device);
  BB_CHECK(ctx.recompute.mode != RecomputeMode::Selective || !ctx.recompute.modules.moe,
           "backend.recompute_modules: 'moe' needs a model with MoE layers; '", cfg.model_type, "' has none");

  DecoderSpec spec = dense_decoder_spec(cfg, cfg.to_json());
  spec.lazy_grad_zero = true;   // the layers below are the library's modules
  spec.build_layer = [lc, &pc, inv_freq, cfg, recompute = ctx.recompute, range = ctx.layers](
                         ParamStore& store, const std::string& prefix, int64_t layer) {
    const SelectiveRecompute sel = recompute.selective_for(layer, range);
    DecoderLayerConfig layer_cfg = lc;
    layer_cfg.attention.recompute_core_attention = sel.core_attn;
    layer_cfg.attention.recompute_qk_norm = sel.layernorm;
    layer_cfg.recompute_norms = sel.layernorm;
    return std::make_unique<DecoderLayer>(store, prefix, layer_cfg, pc, inv_freq,
                                          swiglu_mlp(cfg.hidden_size, cfg.intermediate_size, pc, sel.mlp));
  };
  spec.train_flops = [cfg](int64_t tokens, int64_t seq_len) { return dense_train_flops(cfg, tokens, seq_len); };
  return std::make_unique<Decoder>(std::move(spec), ctx);
}

void DenseProtocol::load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const {
  const DenseConfig cfg = DenseConfig::from_json(chunk.config());
  load_mapped_weights(chunk.params(), ckpt, dense_checkpoint_mapping(cfg), chunk.layers());
}

void DenseProtocol::export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const {
  const DenseConfig cfg = DenseConfig::from_json(chunk.config());
  export_mapped_weights(chunk.params(), pc.tp(), dense_checkpoint_mapping(cfg), chunk.layers(), sink);
}

}  // namespace bb
