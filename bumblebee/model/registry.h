// Model registry: register_model(name, hf_model_types, impls) and lookup.
//
// As in the seed library, the first impl of a model is registered under its
// own name and later ones as "<name>_<impl>"; an HF model_type resolves to the
// model that lists it. Built-in models (qwen3, llama) register themselves the
// first time the registry is used; a user's model registers from the user's
// own code before create_runtime (see examples/).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bumblebee/model/protocol.h"

namespace bb {

void register_model(const std::string& name, const std::vector<std::string>& hf_model_types,
                    const std::vector<std::pair<std::string, std::shared_ptr<ModelProtocol>>>& impls);

// name "auto" resolves through hf_model_type. Errors name what was asked and what exists.
std::shared_ptr<ModelProtocol> resolve_model(const std::string& name, const std::string& impl,
                                             const std::string& hf_model_type);

}  // namespace bb
