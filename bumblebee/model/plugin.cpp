// load_plugin: dlopen, the bb_register_plugin entry point, and the list of
// what is loaded.
#include "bumblebee/model/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "bumblebee/core/error.h"

namespace bb {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_loaded;   // canonical paths

}  // namespace

void load_plugin(const std::string& path) {
  BB_CHECK(!path.empty(), "load_plugin: the plugin path is empty");
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(path, ec);
  BB_CHECK(!ec, "plugin ", path, ": no such file (", ec.message(), ")");
  const std::string file = canonical.string();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (std::find(g_loaded.begin(), g_loaded.end(), file) != g_loaded.end()) return;
  // RTLD_GLOBAL: a plugin may build on another one loaded before it.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    BB_FAIL("plugin ", path, " could not be loaded: ", why ? why : "unknown dlopen error");
  }
  dlerror();
  using RegisterFn = void (*)();
  auto entry = reinterpret_cast<RegisterFn>(dlsym(handle, "bb_register_plugin"));
  if (entry) {
    try {
      entry();
    } catch (const std::exception& e) {
      BB_FAIL("plugin ", path, ": bb_register_plugin failed: ", e.what());
    }
  }
  // The library stays loaded: the models it registered point into it.
  g_loaded.push_back(file);
}

std::vector<std::string> loaded_plugins() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_loaded;
}

}  // namespace bb
