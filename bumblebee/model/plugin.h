// Model plugins: a shared library, built out of tree against an installed
// Bumblebee (find_package(bumblebee), docs/plugins.md), that adds models to
// the registry when it is loaded.
//
// A plugin defines the C entry point
//
//   extern "C" void bb_register_plugin() { bb::register_model(...); }
//
// which load_plugin calls after dlopen; a plugin that registers from a static
// initialiser instead needs none. Loading the same file twice does nothing
// the second time. The plugin and the program share one libbumblebee.so, so
// they share one registry.
#pragma once

#include <string>
#include <vector>

namespace bb {

// Loads the plugin at `path` and runs its bb_register_plugin. Errors name the
// file and carry dlerror's reason (missing file, undefined symbol, ...).
void load_plugin(const std::string& path);
// The plugin files loaded so far, in order.
std::vector<std::string> loaded_plugins();

}  // namespace bb
