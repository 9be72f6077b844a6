// LoRA adapters of the fused MoE expert weights in HF peft's layout
// (target_parameters, peft's ParamWrapper), against the per-expert
// parameters of moe/expert_lora.h. peft holds one pair per fused weight:
//
//   <layer>.mlp.experts[.base_layer].lora_A.weight   [E r, in]    row e r + i  = A_e[i, :]
//   <layer>.mlp.experts[.base_layer].lora_B.weight   [out, E r]   column i E + e = B_e[:, i]
//
// (lora_A is expert-major, lora_B rank-major: peft reshapes A to [E, r, in]
// and B to [out, r, E]). When both gate_up_proj and down_proj are targeted
// peft nests the wrappers, down_proj's outside: gate_up_proj's pair is then
// under `experts.base_layer.`, down_proj's under `experts.`; a single target
// is under `experts.`.
#pragma once

#include <set>
#include <string>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/ckpt/safetensors.h"
#include "bumblebee/primitive/ckpt/weight_mapping.h"
#include "bumblebee/primitive/modules/lora.h"

namespace bb {

// Whether `name` is an expert adapter's ("...mlp.experts.{e}.gate_up_proj.lora_A.weight").
bool is_expert_lora_param(const std::string& name);

// Its tensor in adapter_model.safetensors, e.g.
// "base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight".
std::string peft_expert_tensor_name(const std::string& param_name, const LoraConfig& cfg);

// Calls sink(peft name, fused host tensor) for every expert adapter of the
// chunk: the experts of every ep rank, gathered over `ep` (collective; each
// rank holds an equal, contiguous block of experts).
void export_expert_lora_params(ParamStore& store, dist::Communicator& ep, const LoraConfig& cfg,
                               const WeightSink& sink);

// Copies expert e's A or B out of the fused tensor into `p`; the tensor's
// name joins `used`. Errors name the tensor, both shapes and `base` (the
// adapter's base_model_name_or_path).
void load_expert_lora_param(Parameter& p, const SafetensorsFile& file, const LoraConfig& cfg, const std::string& base,
                            std::set<std::string>& used);

}  // namespace bb
