// The runtime's side of parameter-efficient fine-tuning: the peft.* keys
// turned into the LoRA configuration the model's linear layers read.
#pragma once

#include <memory>

#include "bumblebee/primitive/modules/layer_range.h"
#include "bumblebee/primitive/modules/lora.h"
#include "bumblebee/runtime/config.h"

namespace bb {

// Null for peft.type=none; checks the keys (unknown target module, rank,
// unsupported dora/dropout) with errors naming them.
std::shared_ptr<const LoraConfig> make_lora_config(const PeftConfig& peft);

// Every module peft.target_modules names got an adapter in a chunk that holds
// decoder layers: a valid HF name the model lacks is an error, not a no-op.
void check_lora_targets_found(const LoraConfig& cfg, const ParamStore& store, const LayerRange& range);

}  // namespace bb
