// DeepSeek-V3 checkpoint mapping: Qwen3-MoE's with MLA attention, shared experts and the expert bias.
#include "bumblebee/model/deepseek_v3/deepseek_v3_checkpoint.h"

namespace bb {

namespace {
std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }
}  // namespace

Qwen3MoeConfig deepseek_v3_moe_view(const DeepseekV3Config& cfg) {
  Qwen3MoeConfig m;
  m.dense = cfg.dense;
  m.dense.num_layers += cfg.num_nextn_predict_layers;   // the MTP layers are decoder layers past the main model's
  m.num_experts = cfg.n_routed_experts;
  m.num_experts_per_tok = cfg.num_experts_per_tok;
  m.moe_intermediate_size = cfg.moe_intermediate_size;
  m.norm_topk_prob = cfg.norm_topk_prob;
  for (int64_t i = 0; i < cfg.first_k_dense_replace; ++i) m.mlp_only_layers.push_back(i);
  return m;
}

CheckpointMapping deepseek_v3_checkpoint_mapping(const DeepseekV3Config& cfg, const ExpertRange& experts) {
  const CheckpointMapping base = qwen3_moe_checkpoint_mapping(deepseek_v3_moe_view(cfg), experts);
  CheckpointMapping m;
  m.tied_embedding = base.tied_embedding;
  m.ignored = base.ignored;
  for (const WeightRule& rule : base.rules) {
    const bool attention = rule.part == ModelPart::Layer &&
                           rule.hf_name.rfind(layer_prefix(rule.layer) + "self_attn.", 0) == 0;
    if (!attention) {
      m.rules.push_back(rule);
      if (rule.hf_name != layer_prefix(rule.layer) + "mlp.gate.weight") continue;
      // After the router: its bias, then the shared experts.
      const std::string mlp = layer_prefix(rule.layer) + "mlp.";
      m.rules.push_back({mlp + "gate.e_score_correction_bias", mlp + "gate.e_score_correction_bias", ModelPart::Layer,
                         rule.layer, ShardKind::Replicated});
      if (cfg.n_shared_experts > 0)
        for (auto [proj, split] : {std::pair{"gate_proj", ShardKind::Column}, {"up_proj", ShardKind::Column},
                                   {"down_proj", ShardKind::Row}}) {
          const std::string name = mlp + "shared_experts." + proj + ".weight";
          m.rules.push_back({name, name, ModelPart::Layer, rule.layer, split});
        }
      continue;
    }
    if (rule.hf_name != layer_prefix(rule.layer) + "self_attn.q_proj.weight") continue;   // MLA replaces them all
    const std::string a = layer_prefix(rule.layer) + "self_attn.";
    auto add = [&m, &rule, &a](const std::string& suffix, ShardKind split) {
      m.rules.push_back({a + suffix, a + suffix, ModelPart::Layer, rule.layer, split});
    };
    if (cfg.q_lora_rank > 0) {
      add("q_a_proj.weight", ShardKind::Replicated);
      add("q_a_layernorm.weight", ShardKind::Replicated);
      add("q_b_proj.weight", ShardKind::Column);
    } else {
      add("q_proj.weight", ShardKind::Column);
    }
    add("kv_a_proj_with_mqa.weight", ShardKind::Replicated);
    add("kv_a_layernorm.weight", ShardKind::Replicated);
    add("kv_b_proj.weight", ShardKind::Column);
    add("o_proj.weight", ShardKind::Row);
  }
  // Each MTP layer's own parts, besides its decoder layer's.
  for (int64_t j = cfg.dense.num_layers; j < cfg.dense.num_layers + cfg.num_nextn_predict_layers; ++j)
    for (auto [suffix, split] :
         {std::pair{"embed_tokens.weight", ShardKind::Vocab}, {"enorm.weight", ShardKind::Replicated},
          {"hnorm.weight", ShardKind::Replicated}, {"eh_proj.weight", ShardKind::Replicated},
          {"shared_head.norm.weight", ShardKind::Replicated}, {"shared_head.head.weight", ShardKind::Vocab}}) {
      const std::string name = layer_prefix(j) + suffix;
      m.rules.push_back({name, name, ModelPart::Layer, j, split});
    }
  return m;
}

LayerRange deepseek_v3_mtp_range(const DeepseekV3Config& cfg, LayerRange range) {
  if (range.post_process && range.end_layer >= 0) range.end_layer += cfg.num_nextn_predict_layers;
  return range;
}

void load_deepseek_v3_weights(ParamStore& store, const HFCheckpoint& ckpt, const DeepseekV3Config& cfg,
                              const LayerRange& range) {
  const Qwen3MoeConfig moe = deepseek_v3_moe_view(cfg);
  load_moe_weights(store, ckpt, moe, deepseek_v3_mtp_range(cfg, range),
                   deepseek_v3_checkpoint_mapping(cfg, qwen3_moe_held_experts(store, moe)));
}

void export_deepseek_v3_weights(ParamStore& store, ParallelContext& pc, const DeepseekV3Config& cfg,
                                const LayerRange& range, const WeightSink& sink) {
  const Qwen3MoeConfig moe = deepseek_v3_moe_view(cfg);
  export_moe_weights(store, pc, moe, deepseek_v3_mtp_range(cfg, range), deepseek_v3_checkpoint_mapping(cfg, qwen3_moe_held_experts(store, moe)),
                     sink);
}

}  // namespace bb
