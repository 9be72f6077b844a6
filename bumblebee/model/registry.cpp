// Model registry.
#include "bumblebee/model/registry.h"

#include <mutex>

#include "bumblebee/core/error.h"
#include "bumblebee/model/builtin_models.h"

namespace bb {

namespace {
struct Entry {
  std::string name;
  std::vector<std::string> hf_model_types;
  std::vector<std::pair<std::string, std::shared_ptr<ModelProtocol>>> impls;
};

std::map<std::string, Entry>& entries() {
  static std::map<std::string, Entry> e;
  return e;
}

std::once_flag g_builtins;
void ensure_builtins() { std::call_once(g_builtins, register_builtin_models); }

std::string known_names() {
  std::string out;
  for (const auto& [k, e] : entries()) out += (out.empty() ? "" : ", ") + k;
  return out;
}
}  // namespace

void register_model(const std::string& name, const std::vector<std::string>& hf_model_types,
                    const std::vector<std::pair<std::string, std::shared_ptr<ModelProtocol>>>& impls) {
  BB_CHECK(!name.empty(), "register_model: empty model name");
  BB_CHECK(!impls.empty(), "register_model('", name, "'): no impls given");
  entries()[name] = Entry{name, hf_model_types, impls};
}

std::shared_ptr<ModelProtocol> resolve_model(const std::string& name, const std::string& impl,
                                             const std::string& hf_model_type) {
  ensure_builtins();
  const Entry* entry = nullptr;
  if (name == "auto") {
    for (const auto& [k, e] : entries())
      for (const std::string& t : e.hf_model_types)
        if (t == hf_model_type) entry = &e;
    BB_CHECK(entry, "unsupported model_type '", hf_model_type, "' in config.json (registered models: ",
             known_names(), ")");
  } else {
    auto it = entries().find(name);
    BB_CHECK(it != entries().end(), "unknown model_name '", name, "' (registered models: ", known_names(), ")");
    entry = &it->second;
  }
  if (impl.empty() || impl == "auto") return entry->impls.front().second;
  std::string impls;
  for (const auto& [k, p] : entry->impls) {
    if (k == impl) return p;
    impls += (impls.empty() ? "" : ", ") + k;
  }
  BB_FAIL("model '", entry->name, "' has no impl '", impl, "' (impls: ", impls, ")");
}

}  // namespace bb
