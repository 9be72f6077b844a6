// The parts of the native module bumblebee._bumblebee, each bound in its own
// file: the configuration schema (config_bindings.cpp) and the runtime API
// (runtime_bindings.cpp). The Python package (python/bumblebee/) wraps them.
#pragma once

#include <nanobind/nanobind.h>

namespace bb::python {

void bind_config(nanobind::module_& m);
void bind_runtime(nanobind::module_& m);

}  // namespace bb::python
