// Offload of a model's state: which buffers each part is, and moving them.
#include "bumblebee/runtime/offload.h"

#include <set>
#include <vector>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/runtime/model_state.h"

namespace bb {
namespace {

// The storages of `parts`, each once: with dp = 1 the reduced-gradient shard
// is the flat gradient buffer, and a master that is the parameters is left
// out by the optimizer.
std::vector<Storage*> part_storages(ModelState& st, const OffloadParts& parts) {
  std::vector<Storage*> out;
  std::set<Storage*> seen;
  auto add = [&](const Tensor& t) {
    if (t.defined() && seen.insert(t.storage()).second) out.push_back(t.storage());
  };
  for (auto& chunk : st.chunks)
    for (auto& g : chunk->params().groups()) {
      if (parts.model) add(g->flat_params());
      if (parts.grad) add(g->flat_grads());
    }
  if (parts.optimizer)
    for (const Tensor& t : st.optimizer->state_tensors()) add(t);
  if (parts.grad)
    for (const Tensor& t : st.optimizer->grad_shards()) add(t);
  return out;
}

void set_parts(OffloadParts& where, const OffloadParts& parts, bool on_host) {
  if (parts.model) where.model = on_host;
  if (parts.optimizer) where.optimizer = on_host;
  if (parts.grad) where.grad = on_host;
}

}  // namespace

std::string OffloadParts::str() const {
  std::string s;
  for (auto [set, name] : {std::pair{model, "model"}, {optimizer, "optimizer"}, {grad, "grad"}})
    if (set) s += (s.empty() ? "" : ", ") + std::string(name);
  return s.empty() ? "nothing" : s;
}

void offload_to_host(ModelState& st, const OffloadParts& parts, Device home) {
  if (!parts.any()) return;
  st.optimizer->invalidate_grads();   // no reduce-scatter may still read or write a gradient
  device_synchronize(home);
  for (Storage* s : part_storages(st, parts)) s->relocate(Device::cpu(), true);
  set_parts(st.offloaded, parts, true);
  device_release_cached(home);
}

void reload_to_device(ModelState& st, const OffloadParts& parts, Device home) {
  for (Storage* s : part_storages(st, parts)) s->relocate(home, false);
  set_parts(st.offloaded, parts, false);
}

void check_on_device(const ModelState& st, const OffloadParts& needed, const char* call) {
  OffloadParts missing{needed.model && st.offloaded.model, needed.optimizer && st.offloaded.optimizer,
                       needed.grad && st.offloaded.grad};
  BB_CHECK(!missing.any(), call, ": the model's ", missing.str(),
           " is offloaded to host memory (Runtime::to); move it back with to(h, the runtime's device) first");
}

}  // namespace bb
