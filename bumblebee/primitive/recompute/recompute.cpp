// Recompute forward (input only) and backward (forward again, then backward);
// parsing of the recompute configuration and which layers it covers.
#include "bumblebee/primitive/recompute/recompute.h"

#include <algorithm>
#include <sstream>

namespace bb {

RecomputeMode recompute_from_name(const std::string& name) {
  if (name == "none" || name.empty()) return RecomputeMode::None;
  if (name == "selective") return RecomputeMode::Selective;
  if (name == "full") return RecomputeMode::Full;
  BB_FAIL("unknown recompute mode '", name, "' (expected none, selective or full)");
}

RecomputeConfig parse_recompute(const std::string& mode, const std::string& modules, const std::string& method,
                                int64_t num_layers) {
  RecomputeConfig c;
  c.mode = recompute_from_name(mode);
  if (method == "block" || method.empty())
    c.method = RecomputeMethod::Block;
  else if (method == "uniform")
    c.method = RecomputeMethod::Uniform;
  else
    BB_FAIL("backend.recompute_method: unknown method '", method, "' (expected block or uniform)");
  BB_CHECK(num_layers >= 0, "backend.recompute_num_layers must be >= 0, got ", num_layers);
  c.num_layers = num_layers;
  BB_CHECK(c.method == RecomputeMethod::Block || c.mode == RecomputeMode::Full,
           "backend.recompute_method=uniform needs backend.recompute=full (got '", mode, "')");
  BB_CHECK(c.method == RecomputeMethod::Block || num_layers >= 1,
           "backend.recompute_method=uniform needs backend.recompute_num_layers >= 1 (the run length), got ",
           num_layers);
  if (modules.empty()) return c;
  BB_CHECK(c.mode == RecomputeMode::Selective, "backend.recompute_modules='", modules,
           "' needs backend.recompute=selective (got '", mode, "')");
  c.modules = {};
  std::stringstream list(modules);
  std::string m;
  while (std::getline(list, m, ',')) {
    m.erase(0, m.find_first_not_of(" \t"));
    m.erase(m.find_last_not_of(" \t") + 1);
    if (m == "core_attn")
      c.modules.core_attn = true;
    else if (m == "mlp")
      c.modules.mlp = true;
    else if (m == "moe")
      c.modules.moe = true;
    else if (m == "layernorm")
      c.modules.layernorm = true;
    else
      BB_FAIL("backend.recompute_modules: unknown module '", m, "' in '", modules,
              "' (expected a comma-separated list of core_attn, layernorm, mlp, moe)");
  }
  return c;
}

SelectiveRecompute RecomputeConfig::selective_for(int64_t layer, const LayerRange& range) const {
  if (mode != RecomputeMode::Selective) return {};
  if (num_layers > 0 && layer - range.first_layer >= num_layers) return {};
  return modules;
}

std::vector<std::pair<int64_t, int64_t>> RecomputeConfig::full_runs(int64_t count) const {
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (mode != RecomputeMode::Full) return runs;
  if (method == RecomputeMethod::Uniform) {
    for (int64_t i = 0; i < count; i += num_layers) runs.emplace_back(i, std::min(count, i + num_layers));
    return runs;
  }
  const int64_t n = num_layers > 0 ? std::min(count, num_layers) : count;
  for (int64_t i = 0; i < n; ++i) runs.emplace_back(i, i + 1);
  return runs;
}

namespace {
struct RecomputeState : BlockState {
  Tensor x;
};
}  // namespace

Tensor Recompute::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  std::unique_ptr<BlockState> dropped;
  Tensor y = inner_->forward(x, seq, dropped);
  auto st = std::make_unique<RecomputeState>();
  st->x = x;
  state = std::move(st);
  return y;
}

Tensor Recompute::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "Recompute::backward without a saved forward");
  const Tensor x = static_cast<RecomputeState&>(*state).x;
  state.reset();
  std::unique_ptr<BlockState> inner_state;
  inner_->forward(x, seq, inner_state);
  return inner_->backward(dy, seq, inner_state);
}

bool Recompute::drop_input(BlockState& state) {
  static_cast<RecomputeState&>(state).x = Tensor();
  return true;
}

void Recompute::restore_input(const Tensor& x, BlockState& state) { static_cast<RecomputeState&>(state).x = x; }

BlockFactory recomputed(BlockFactory factory) {
  return [factory = std::move(factory)](ParamStore& store, const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<Recompute>(factory(store, prefix));
  };
}

}  // namespace bb
