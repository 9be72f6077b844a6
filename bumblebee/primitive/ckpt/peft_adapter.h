// LoRA adapters in HF peft's format: adapter_model.safetensors and
// adapter_config.json as PeftModel.save_pretrained writes them, and the merge
// of an adapter into its base weight for a full HF export.
//
//   base_model.model.<module>.lora_A.weight   [r, in]
//   base_model.model.<module>.lora_B.weight   [out, r]
//   base_model.model.<module>.lora_magnitude_vector   [out]   (DoRA)
// (<module>: the HF module, e.g. model.layers.0.self_attn.q_proj), and the
// fused expert adapters of target_parameters (peft_expert_adapter.h). Tensors are
// stored in the parameter dtype, as peft stores them. Loading checks every
// tensor against the model's adapter parameters: a tensor the model has no
// adapter for, a missing one or a shape that differs is an error naming the
// tensor, both shapes and the adapter's base_model_name_or_path.
#pragma once

#include <string>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/ckpt/weight_mapping.h"
#include "bumblebee/primitive/modules/lora.h"

namespace bb {

// "model.layers.0.self_attn.q_proj.lora_A.weight" -> "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
std::string peft_tensor_name(const std::string& param_name);

// Calls sink(peft name, full tensor: on the parameter's device, the fused expert
// adapters on the host) for every adapter parameter of the
// chunk, in registration order, then for the expert adapters fused over
// every ep rank's experts. Collective over the tp and the ep group.
void export_lora_params(ParamStore& store, TensorParallel& tp, dist::Communicator& ep, const WeightSink& sink);

// adapter_config.json's content for `cfg` (peft's LoraConfig fields; peft
// fills the ones it lacks with its defaults).
std::string peft_adapter_config(const LoraConfig& cfg, const std::string& base_model_name_or_path);

// Reads `dir`/adapter_config.json and adapter_model.safetensors into the
// adapter parameters of the chunk holding `range` (each rank its shard;
// tensors of other stages' layers are skipped). The adapter's r, lora_alpha,
// use_rslora and use_dora must equal the configuration's.
void load_peft_adapter(ParamStore& store, const std::string& dir, const LoraConfig& cfg, const LayerRange& range);

// W + s B A of the base weight `hf_name` (full, host), for DoRA times
// m / ||W + s B A|| per row, computed in float64 and
// returned in W's dtype; W itself when the store has no adapter for it.
// Collective over the tp group when it has.
Tensor merge_lora_weight(ParamStore& store, TensorParallel& tp, const std::string& hf_name, const Tensor& full_weight);

}  // namespace bb
