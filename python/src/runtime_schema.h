// The runtime's configuration schema as the Python bindings use it.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/runtime/config_schema.h"

namespace bb::python {

const ConfigSchema& runtime_schema();
// key=value words -> RuntimeConfig, checked by the schema (errors name the key).
RuntimeConfig parse_runtime_config(const std::vector<std::string>& words);

}  // namespace bb::python
