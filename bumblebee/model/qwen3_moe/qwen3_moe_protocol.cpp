// Qwen3MoeProtocol: config parsing, construction from primitives, weights, registration.
#include "bumblebee/model/qwen3_moe/qwen3_moe_protocol.h"

#include "bumblebee/model/decoder/decoder.h"
#include "bumblebee/model/dense/dense_protocol.h"
#include "bumblebee/model/qwen3_moe/qwen3_moe_checkpoint.h"
#include "bumblebee/model/registry.h"
#include "bumblebee/primitive/modules/decoder_layer.h"
#include "bumblebee/primitive/modules/mlp.h"
#include "bumblebee/primitive/modules/moe/sparse_moe.h"

namespace bb {

nlohmann::json Qwen3MoeProtocol::build_model_config(const nlohmann::json& hf_config,
                                                    const nlohmann::json& overrides) const {
  return parse_qwen3_moe_hf_config(hf_config, overrides).to_json();
}

double qwen3_moe_train_flops(const Qwen3MoeConfig& cfg, int64_t tokens, int64_t seq_len) {
  const DenseConfig& d = cfg.dense;
  const double h = double(d.hidden_size), q = double(d.num_heads * d.head_dim);
  const double kv = double(d.num_kv_heads * d.head_dim);
  double n = double(d.vocab_size) * h;
  for (int64_t i = 0; i < d.num_layers; ++i) {
    n += h * (q + 2 * kv) + q * h;
    n += cfg.is_moe_layer(i) ? double(cfg.num_experts) * h +
                                   double(cfg.num_experts_per_tok) * 3 * h * double(cfg.moe_intermediate_size)
                             : 3 * h * double(d.intermediate_size);
  }
  const double attn = 6.0 * double(d.num_layers) * double(seq_len) * q;
  return double(tokens) * (6.0 * n + attn);
}

std::unique_ptr<ModelChunk> Qwen3MoeProtocol::build_model(const nlohmann::json& model_config,
                                                          const BuildContext& ctx) const {
  for (const auto& [k, v] : ctx.impl_cfg.items()) BB_FAIL("unknown impl_cfg key '", k, "' for qwen3_moe");
  const Qwen3MoeConfig cfg = Qwen3MoeConfig::from_json(model_config);
  const DenseConfig& d = cfg.dense;
  ParallelContext& pc = *ctx.parallel;
  DecoderLayerConfig lc;
  lc.attention = {d.hidden_size, d.num_heads, d.num_kv_heads, d.head_dim, true, d.rms_norm_eps};
  lc.norm_eps = d.rms_norm_eps;
  const Tensor inv_freq = rope_inv_freq(d.rope, d.head_dim).to(ctx.device);

  DecoderSpec spec = dense_decoder_spec(d, cfg.to_json());
  spec.moe = true;
  std::vector<int64_t> moe_index(size_t(d.num_layers), 0);   // layer -> its place among the MoE layers
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < d.num_layers; ++i)
    if (cfg.is_moe_layer(i)) moe_index[size_t(i)] = moe_layers++;
  spec.router_losses = {cfg.output_router_logits, parse_aux_loss_type(cfg.moe_aux_loss_type),
                        cfg.router_aux_loss_coef, cfg.router_z_loss_coef};
  spec.router_shape = {moe_layers, cfg.num_experts_per_tok, cfg.num_experts,
                       spec.router_losses.aux && spec.router_losses.aux_type == AuxLossType::Hf,
                       spec.router_losses.aux || cfg.router_z_loss_coef > 0 || cfg.moe_expert_capacity_factor > 0};
  std::shared_ptr<ExpertBiasUpdate> bias_update;
  if (cfg.moe_router_bias_update_rate > 0) {
    bias_update = std::make_shared<ExpertBiasUpdate>(cfg.moe_router_bias_update_rate, pc.dp_cp());
    spec.after_optimizer_step = [bias_update] { bias_update->update(); };
  }
  spec.lazy_grad_zero = true;   // the layers below are the library's modules
  spec.build_layer = [lc, &pc, inv_freq, cfg, moe_index, bias_update, recompute = ctx.recompute, range = ctx.layers](
                         ParamStore& store, const std::string& prefix, int64_t layer) {
    const SelectiveRecompute sel = recompute.selective_for(layer, range);
    DecoderLayerConfig layer_cfg = lc;
    layer_cfg.attention.recompute_core_attention = sel.core_attn;
    layer_cfg.attention.recompute_qk_norm = sel.layernorm;
    layer_cfg.recompute_norms = sel.layernorm;
    BlockFactory ffn;
    if (cfg.is_moe_layer(layer)) {
      // Qwen3-MoE's router: softmax top-k, no groups, no scaling; an expert
      // bias only for auxiliary-loss-free balancing.
      SparseMoEConfig moe_cfg;
      moe_cfg.hidden = cfg.dense.hidden_size;
      moe_cfg.moe_ffn = cfg.moe_intermediate_size;
      moe_cfg.num_experts = cfg.num_experts;
      moe_cfg.top_k = cfg.num_experts_per_tok;
      moe_cfg.norm_topk_prob = cfg.norm_topk_prob;
      moe_cfg.recompute_activation = sel.mlp;
      moe_cfg.score = ops::MoeScore::Softmax;
      moe_cfg.layer = layer;
      moe_cfg.moe_index = moe_index[size_t(layer)];
      moe_cfg.capacity_factor = cfg.moe_expert_capacity_factor;
      moe_cfg.bias_update = bias_update;
      ffn = sparse_moe(moe_cfg, pc);
      if (sel.moe) ffn = recomputed(std::move(ffn));
    } else {
      ffn = swiglu_mlp(cfg.dense.hidden_size, cfg.dense.intermediate_size, pc, sel.mlp);
    }
    return std::make_unique<DecoderLayer>(store, prefix, layer_cfg, pc, inv_freq, ffn);
  };
  spec.train_flops = [cfg](int64_t tokens, int64_t seq_len) { return qwen3_moe_train_flops(cfg, tokens, seq_len); };
  return std::make_unique<Decoder>(std::move(spec), ctx);
}

void Qwen3MoeProtocol::load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const {
  load_qwen3_moe_weights(chunk.params(), ckpt, Qwen3MoeConfig::from_json(chunk.config()), chunk.layers());
}

void Qwen3MoeProtocol::export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const {
  const Qwen3MoeConfig cfg = Qwen3MoeConfig::from_json(chunk.config());
  export_qwen3_moe_weights(chunk.params(), pc, cfg, chunk.layers(), sink);
}

void register_qwen3_moe() {
  register_model("qwen3_moe", {"qwen3_moe"}, {{"lite", std::make_shared<Qwen3MoeProtocol>()}});
}

}  // namespace bb
