// The HF checkpoint of DeepSeek-V3: Qwen3-MoE's (qwen3_moe_checkpoint.h:
// embedding, norms, head, the routed experts per expert or fused, the dense
// MLP of the first first_k_dense_replace layers) with
//   model.layers.{i}.self_attn.q_a_proj.weight          [q_lora_rank, H]        replicated
//   model.layers.{i}.self_attn.q_a_layernorm.weight     [q_lora_rank]           replicated
//   model.layers.{i}.self_attn.q_b_proj.weight          [heads x qk_head_dim, q_lora_rank]  column (per head)
//     (or self_attn.q_proj.weight [heads x qk_head_dim, H] when q_lora_rank is null)
//   model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight [kv_lora_rank + qk_rope_head_dim, H]  replicated
//   model.layers.{i}.self_attn.kv_a_layernorm.weight    [kv_lora_rank]          replicated
//   model.layers.{i}.self_attn.kv_b_proj.weight         [heads x (qk_nope + v), kv_lora_rank]  column (per head)
//   model.layers.{i}.self_attn.o_proj.weight            [H, heads x v_head_dim] row
//   model.layers.{i}.mlp.gate.e_score_correction_bias   [E]                     replicated (a buffer)
//   model.layers.{i}.mlp.shared_experts.{gate,up,down}_proj.weight  column, column, row
// for the attention and each MoE layer. Multi-token prediction layer
// j = num_hidden_layers + k - 1 (k = 1..num_nextn_predict_layers, as
// DeepSeek's hub checkpoints carry them) is a decoder layer under the same
// names (an MoE layer) plus
//   model.layers.{j}.embed_tokens.weight       [V, H]   vocab
//   model.layers.{j}.enorm.weight / hnorm.weight [H]    replicated
//   model.layers.{j}.eh_proj.weight            [H, 2H]  replicated
//   model.layers.{j}.shared_head.norm.weight   [H]      replicated
//   model.layers.{j}.shared_head.head.weight   [V, H]   vocab
// held, loaded and exported by the last pipeline stage.
#pragma once

#include "bumblebee/model/deepseek_v3/deepseek_v3_config.h"
#include "bumblebee/model/qwen3_moe/qwen3_moe_checkpoint.h"

namespace bb {

// The Qwen3-MoE view of the config: the routed experts, the MoE layers, the dense MLP.
Qwen3MoeConfig deepseek_v3_moe_view(const DeepseekV3Config& cfg);

CheckpointMapping deepseek_v3_checkpoint_mapping(const DeepseekV3Config& cfg, const ExpertRange& experts);

// The layers a chunk's checkpoint tensors cover: the last stage's range
// extends over the MTP layers.
LayerRange deepseek_v3_mtp_range(const DeepseekV3Config& cfg, LayerRange range);

void load_deepseek_v3_weights(ParamStore& store, const HFCheckpoint& ckpt, const DeepseekV3Config& cfg,
                              const LayerRange& range);
void export_deepseek_v3_weights(ParamStore& store, ParallelContext& pc, const DeepseekV3Config& cfg,
                                const LayerRange& range, const WeightSink& sink);

}  // namespace bb
