// memory_breakdown: sizes of the buffers a model handle owns on this rank.
#include "bumblebee/runtime/memory_breakdown.h"

#include <algorithm>

#include "bumblebee/runtime/model_state.h"

namespace bb {

namespace {

size_t bytes_of(const Tensor& t) { return t.defined() ? t.nbytes() : 0; }

double gib(size_t bytes) { return double(bytes) / double(1ull << 30); }

}  // namespace

MemoryBreakdown memory_breakdown(const ModelHandle& h) {
  MemoryBreakdown m;
  for (ModelChunk* chunk : h.chunks())
    for (auto& group : chunk->params().groups()) {
      m.weights += bytes_of(group->flat_params());
      m.grads += bytes_of(group->flat_grads());
    }
  for (const DistributedOptimizer::GroupState& g : h.optimizer().groups()) {
    if (!g.master_is_param) m.master += bytes_of(g.master);
    m.moments += bytes_of(g.exp_avg) + bytes_of(g.exp_avg_sq);
    m.host_master += bytes_of(g.host.master);
    m.host_moments += bytes_of(g.host.exp_avg) + bytes_of(g.host.exp_avg_sq);
    m.host_staging += g.host.staging_bytes();
  }
  m.host_is_device = Device::parse(h.state().cfg.device).is_cpu();
  return m;
}

nlohmann::json memory_breakdown_json(const MemoryBreakdown& m, size_t in_use_before_step, size_t peak) {
  const size_t held = m.total() + (m.host_is_device ? m.host_total() : 0);
  const size_t other = in_use_before_step - std::min(in_use_before_step, held);
  const size_t step = peak - std::min(peak, in_use_before_step);
  return {{"weights_gb", gib(m.weights)}, {"grads_gb", gib(m.grads)}, {"master_gb", gib(m.master)},
          {"moments_gb", gib(m.moments)}, {"other_static_gb", gib(other)},
          {"activations_and_workspace_gb", gib(step)}, {"peak_gb", gib(peak)},
          {"host_master_gb", gib(m.host_master)}, {"host_moments_gb", gib(m.host_moments)},
          {"host_staging_gb", gib(m.host_staging)}};
}

}  // namespace bb
