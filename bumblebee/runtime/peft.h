// The runtime's side of parameter-efficient fine-tuning: the peft.* keys
// turned into the LoRA configuration the model's linear layers read.
#pragma once

#include <memory>

#include "bumblebee/primitive/modules/lora.h"
#include "bumblebee/runtime/config.h"

namespace bb {

// Null for peft.type=none; checks the keys (unknown target module, rank,
// unsupported dora/dropout) with errors naming them.
std::shared_ptr<const LoraConfig> make_lora_config(const PeftConfig& peft);

}  // namespace bb
