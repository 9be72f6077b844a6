// DeepseekV3Protocol: config parsing, construction from primitives, weights, registration.
#include "bumblebee/model/deepseek_v3/deepseek_v3_protocol.h"

#include "bumblebee/model/decoder/decoder.h"
#include "bumblebee/model/dense/dense_protocol.h"
#include "bumblebee/model/deepseek_v3/deepseek_v3_checkpoint.h"
#include "bumblebee/model/registry.h"
#include "bumblebee/primitive/modules/decoder_layer.h"
#include "bumblebee/primitive/modules/mla_attention.h"
#include "bumblebee/primitive/modules/mlp.h"
#include "bumblebee/primitive/modules/moe/shared_experts.h"
#include "bumblebee/primitive/modules/moe/sparse_moe.h"

namespace bb {

nlohmann::json DeepseekV3Protocol::build_model_config(const nlohmann::json& hf_config,
                                                      const nlohmann::json& overrides) const {
  return parse_deepseek_v3_hf_config(hf_config, overrides).to_json();
}

double deepseek_v3_train_flops(const DeepseekV3Config& cfg, int64_t tokens, int64_t seq_len) {
  const DenseConfig& d = cfg.dense;
  const double h = double(d.hidden_size), heads = double(d.num_heads);
  const double qk = double(cfg.qk_head_dim()), v = double(cfg.v_head_dim);
  const double q = cfg.q_lora_rank > 0 ? double(cfg.q_lora_rank) * (h + heads * qk) : h * heads * qk;
  const double kv = h * double(cfg.kv_lora_rank + cfg.qk_rope_head_dim) +
                    double(cfg.kv_lora_rank) * heads * double(cfg.qk_nope_head_dim + cfg.v_head_dim);
  double n = double(d.vocab_size) * h;
  for (int64_t i = 0; i < d.num_layers; ++i) {
    n += q + kv + heads * v * h;
    n += cfg.is_moe_layer(i) ? double(cfg.n_routed_experts) * h +
                                   double(cfg.num_experts_per_tok + cfg.n_shared_experts) * 3 * h *
                                       double(cfg.moe_intermediate_size)
                             : 3 * h * double(d.intermediate_size);
  }
  // Scores over qk_head_dim and values over v_head_dim, causal (half the square).
  const double attn = 3.0 * double(d.num_layers) * double(seq_len) * heads * (qk + v);
  return double(tokens) * (6.0 * n + attn);
}

std::unique_ptr<ModelChunk> DeepseekV3Protocol::build_model(const nlohmann::json& model_config,
                                                            const BuildContext& ctx) const {
  for (const auto& [k, v] : ctx.impl_cfg.items()) BB_FAIL("unknown impl_cfg key '", k, "' for deepseek_v3");
  const DeepseekV3Config cfg = DeepseekV3Config::from_json(model_config);
  const DenseConfig& d = cfg.dense;
  ParallelContext& pc = *ctx.parallel;
  MLAConfig mla;
  mla.hidden = d.hidden_size;
  mla.num_heads = d.num_heads;
  mla.q_lora_rank = cfg.q_lora_rank;
  mla.kv_lora_rank = cfg.kv_lora_rank;
  mla.qk_nope_head_dim = cfg.qk_nope_head_dim;
  mla.qk_rope_head_dim = cfg.qk_rope_head_dim;
  mla.v_head_dim = cfg.v_head_dim;
  mla.norm_eps = d.rms_norm_eps;
  mla.softmax_scale = cfg.softmax_scale();
  mla.rope_scale = rope_attention_factor(d.rope);
  mla.rope_interleave = cfg.rope_interleave;
  const Tensor inv_freq = rope_inv_freq(d.rope, cfg.qk_rope_head_dim).to(ctx.device);

  DecoderSpec spec = dense_decoder_spec(d, cfg.to_json());
  spec.moe = true;
  // The MTP layers (num_layers + k - 1) follow the main model's MoE layers;
  // router replay covers the main model's only (multi_token_prediction.h).
  std::vector<int64_t> moe_index(size_t(d.num_layers + cfg.num_nextn_predict_layers), 0);
  int64_t moe_layers = 0;
  for (size_t i = 0; i < moe_index.size(); ++i)
    if (cfg.is_moe_layer(int64_t(i))) moe_index[i] = moe_layers++;
  spec.router_shape = {moe_layers - cfg.num_nextn_predict_layers, cfg.num_experts_per_tok, cfg.n_routed_experts,
                       false};
  spec.mtp_depths = cfg.num_nextn_predict_layers;
  spec.mtp_loss_scale = cfg.mtp_loss_scaling_factor;
  spec.lazy_grad_zero = true;   // the layers below are the library's modules
  spec.build_layer = [mla, &pc, inv_freq, cfg, moe_index, recompute = ctx.recompute, range = ctx.layers](
                         ParamStore& store, const std::string& prefix, int64_t layer) {
    const SelectiveRecompute sel = recompute.selective_for(layer, range);
    BlockFactory ffn;
    if (cfg.is_moe_layer(layer)) {
      SparseMoEConfig moe_cfg;
      moe_cfg.hidden = cfg.dense.hidden_size;
      moe_cfg.moe_ffn = cfg.moe_intermediate_size;
      moe_cfg.num_experts = cfg.n_routed_experts;
      moe_cfg.top_k = cfg.num_experts_per_tok;
      moe_cfg.norm_topk_prob = cfg.norm_topk_prob;
      moe_cfg.recompute_activation = sel.mlp;
      moe_cfg.score = ops::MoeScore::Sigmoid;
      moe_cfg.num_groups = cfg.n_group;
      moe_cfg.topk_groups = cfg.topk_group;
      moe_cfg.routed_scaling_factor = cfg.routed_scaling_factor;
      moe_cfg.layer = layer;
      moe_cfg.moe_index = moe_index[size_t(layer)];
      ffn = sparse_moe(moe_cfg, pc);
      if (cfg.n_shared_experts > 0)
        ffn = with_shared_experts(
            std::move(ffn),
            swiglu_mlp(cfg.dense.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts, pc, sel.mlp));
      if (sel.moe) ffn = recomputed(std::move(ffn));
    } else {
      ffn = swiglu_mlp(cfg.dense.hidden_size, cfg.dense.intermediate_size, pc, sel.mlp);
    }
    MLAConfig layer_mla = mla;
    layer_mla.recompute_norms = sel.layernorm;
    return std::make_unique<DecoderLayer>(store, prefix, cfg.dense.hidden_size, cfg.dense.rms_norm_eps,
                                          mla_attention(layer_mla, pc, inv_freq), ffn, sel.layernorm);
  };
  spec.train_flops = [cfg](int64_t tokens, int64_t seq_len) { return deepseek_v3_train_flops(cfg, tokens, seq_len); };
  return std::make_unique<Decoder>(std::move(spec), ctx);
}

void DeepseekV3Protocol::load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const {
  load_deepseek_v3_weights(chunk.params(), ckpt, DeepseekV3Config::from_json(chunk.config()), chunk.layers());
}

void DeepseekV3Protocol::export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const {
  export_deepseek_v3_weights(chunk.params(), pc, DeepseekV3Config::from_json(chunk.config()), chunk.layers(), sink);
}

void register_deepseek_v3() {
  register_model("deepseek_v3", {"deepseek_v3"}, {{"lite", std::make_shared<DeepseekV3Protocol>()}});
}

}  // namespace bb
