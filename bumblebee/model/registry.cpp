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

// Built-ins register before any other model, so a user's register_model of a
// built-in name replaces it rather than being replaced on first lookup.
std::once_flag g_builtins;
thread_local bool t_registering_builtins = false;
void ensure_builtins() {
  if (t_registering_builtins) return;  // the built-ins' own register_model calls
  std::call_once(g_builtins, [] {
    t_registering_builtins = true;
    register_builtin_models();
    t_registering_builtins = false;
  });
}

// The seed's naming: a model's first impl answers to `name`, each later one to `name_impl`.
std::string impl_key(const Entry& e, size_t i) { return i == 0 ? e.name : e.name + "_" + e.impls[i].first; }

std::string known_names() {
  std::string out;
  for (const auto& [k, e] : entries())
    for (size_t i = 0; i < e.impls.size(); ++i) out += (out.empty() ? "" : ", ") + impl_key(e, i);
  return out;
}
}  // namespace

void register_model(const std::string& name, const std::vector<std::string>& hf_model_types,
                    const std::vector<std::pair<std::string, std::shared_ptr<ModelProtocol>>>& impls) {
  BB_CHECK(!name.empty(), "register_model: empty model name");
  BB_CHECK(!impls.empty(), "register_model('", name, "'): no impls given");
  ensure_builtins();
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
  } else if (auto it = entries().find(name); it != entries().end()) {
    entry = &it->second;
  } else {
    // `name_impl` names the impl itself; `impl` may only repeat it or be the default (the first impl's key).
    for (const auto& [k, e] : entries())
      for (size_t i = 1; i < e.impls.size(); ++i) {
        if (impl_key(e, i) != name) continue;
        const std::string& own = e.impls[i].first;
        BB_CHECK(impl.empty() || impl == "auto" || impl == own || impl == e.impls.front().first, "model_name '",
                 name, "' selects impl '", own, "' of model '", e.name, "', but impl is '", impl, "'");
        return e.impls[i].second;
      }
    BB_FAIL("unknown model_name '", name, "' (registered models: ", known_names(), ")");
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
