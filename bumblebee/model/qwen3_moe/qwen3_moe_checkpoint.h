// The HF checkpoint of Qwen3-MoE: the dense decoder's tensors
// (dense_checkpoint.h) with each MoE layer's MLP replaced by
//   model.layers.{i}.mlp.gate.weight                      [E, H]  the router
//   model.layers.{i}.mlp.experts.{e}.gate_proj.weight     [I, H]  per expert (the hub layout)
//   model.layers.{i}.mlp.experts.{e}.up_proj.weight       [I, H]
//   model.layers.{i}.mlp.experts.{e}.down_proj.weight     [H, I]
// or, as transformers 5 writes them with save_original_format=False, fused:
//   model.layers.{i}.mlp.experts.gate_up_proj             [E, 2I, H]  expert e's gate rows, then its up rows
//   model.layers.{i}.mlp.experts.down_proj                [E, H, I]
// Native parameters are per expert under the hub names. Loading accepts
// either layout per layer (a layer holding both is an error naming it);
// export writes the per-expert layout. Dense tensors are split over tp as
// the dense models' are.
//
// With expert parallelism a chunk holds one contiguous block of experts per
// MoE layer (ExpertRange): its mapping has rules for those experts only and
// lists the other experts' tensors as ignored, so loading picks the chunk's
// experts from either layout and still checks the whole checkpoint. With
// expert tensor parallelism each expert's gate_proj / up_proj rows and
// down_proj columns are split over etp (Column / Row rules), from either
// layout. Export gathers each expert over etp, then every expert over ep.
#pragma once

#include "bumblebee/model/qwen3_moe/qwen3_moe_config.h"
#include "bumblebee/primitive/ckpt/weight_mapping.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

// The experts [first, first + count) a chunk holds in every MoE layer.
struct ExpertRange {
  int64_t first = 0, count = 0;
  bool ffn_split = false;   // etp > 1: gate/up split by rows (Column), down by columns (Row)
  bool holds(int64_t e) const { return e >= first && e < first + count; }
};

// The experts whose parameters `store` holds (all of them at ep = 1).
ExpertRange qwen3_moe_held_experts(const ParamStore& store, const Qwen3MoeConfig& cfg);

// The per-expert layout as a CheckpointMapping of a chunk holding `experts`.
CheckpointMapping qwen3_moe_checkpoint_mapping(const Qwen3MoeConfig& cfg, const ExpertRange& experts);

// Whether MoE layer `layer` of `ckpt` is stored fused (errors when it holds both layouts or half of the fused one).
bool qwen3_moe_layer_is_fused(const HFCheckpoint& ckpt, const Qwen3MoeConfig& cfg, int64_t layer);

void load_qwen3_moe_weights(ParamStore& store, const HFCheckpoint& ckpt, const Qwen3MoeConfig& cfg,
                            const LayerRange& range);

// Export in the per-expert layout. Each expert is gathered over etp, and with
// ep > 1 broadcast over the ep group from the rank holding it, so each rank's
// sink sees all experts whole (a collective: every rank of the stage calls it).
void export_qwen3_moe_weights(ParamStore& store, ParallelContext& pc, const Qwen3MoeConfig& cfg,
                              const LayerRange& range, const WeightSink& sink);

// The same for another MoE model whose checkpoint differs outside the
// routed experts (DeepSeek-V3): `mapping` is qwen3_moe_checkpoint_mapping's
// with the model's own non-expert rules; `cfg` gives the experts and the MoE layers.
void load_moe_weights(ParamStore& store, const HFCheckpoint& ckpt, const Qwen3MoeConfig& cfg, const LayerRange& range,
                      const CheckpointMapping& mapping);
void export_moe_weights(ParamStore& store, ParallelContext& pc, const Qwen3MoeConfig& cfg, const LayerRange& range,
                        CheckpointMapping mapping, const WeightSink& sink);

}  // namespace bb
