// Qwen3-MoE checkpoint: the per-expert mapping, and loading of either expert layout.
#include "bumblebee/model/qwen3_moe/qwen3_moe_checkpoint.h"

#include <algorithm>
#include <set>

#include "bumblebee/model/dense/dense_checkpoint.h"
#include "bumblebee/primitive/ckpt/hf_weights.h"
#include "bumblebee/primitive/modules/lora.h"

namespace bb {

namespace {
std::string mlp_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + ".mlp."; }

std::string expert_prefix(int64_t layer, int64_t e) {
  return mlp_prefix(layer) + "experts." + std::to_string(e) + ".";
}

bool is_expert_rule(const WeightRule& rule) { return rule.native_name.find(".mlp.experts.") != std::string::npos; }

Parameter& param_named(ParamStore& store, const std::string& name) {
  Parameter* p = store.find(name);
  BB_CHECK(p, "the qwen3_moe checkpoint mapping names parameter '", name, "', which this chunk does not have");
  return *p;
}

void check_shape(const HFCheckpoint& ckpt, const std::string& name, const Shape& expected) {
  BB_CHECK(ckpt.has(name), "checkpoint ", ckpt.dir(), " lacks tensor '", name, "'");
  BB_CHECK(ckpt.shape(name) == expected, "checkpoint tensor '", name, "' has shape ", shape_str(ckpt.shape(name)),
           ", the model expects ", shape_str(expected));
}
}  // namespace

ExpertRange qwen3_moe_held_experts(const ParamStore& store, const Qwen3MoeConfig& cfg) {
  // Expert parameters are named model.layers.{i}.mlp.experts.{e}.*: read e.
  int64_t lo = cfg.num_experts, hi = -1;
  bool split = false;
  const std::string marker = ".mlp.experts.";
  for (const Parameter& p : store.params()) {
    if (p.cls != ParamClass::Expert) continue;
    split = split || !p.replicated_over_tp();
    const size_t at = p.name.find(marker);
    BB_CHECK(at != std::string::npos, "expert parameter '", p.name, "' is not named like an HF qwen3_moe expert");
    const int64_t e = std::stoll(p.name.substr(at + marker.size()));
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  if (hi < 0) return {0, cfg.num_experts};   // a chunk without MoE layers
  return {lo, hi - lo + 1, split};
}

CheckpointMapping qwen3_moe_checkpoint_mapping(const Qwen3MoeConfig& cfg, const ExpertRange& experts) {
  const CheckpointMapping dense = dense_checkpoint_mapping(cfg.dense);
  CheckpointMapping m;
  m.tied_embedding = dense.tied_embedding;
  m.ignored = dense.ignored;
  for (const WeightRule& rule : dense.rules) {
    const bool moe_mlp = rule.part == ModelPart::Layer && cfg.is_moe_layer(rule.layer) &&
                         rule.hf_name.rfind(mlp_prefix(rule.layer), 0) == 0;
    if (!moe_mlp) {
      m.rules.push_back(rule);
      continue;
    }
    if (rule.hf_name != mlp_prefix(rule.layer) + "gate_proj.weight") continue;   // the MoE rules replace all three
    const int64_t i = rule.layer;
    auto add = [&m, i](const std::string& name, ShardKind split) {
      m.rules.push_back({name, name, ModelPart::Layer, i, split});
    };
    add(mlp_prefix(i) + "gate.weight", ShardKind::Replicated);
    // Auxiliary-loss-free balancing's bias, under DeepSeek-V3's HF name; a
    // Qwen3-MoE checkpoint has none (the bias then starts at zero).
    if (cfg.moe_router_bias_update_rate > 0) {
      add(mlp_prefix(i) + "gate.e_score_correction_bias", ShardKind::Replicated);
      m.rules.back().optional = true;
    }
    for (int64_t e = 0; e < cfg.num_experts; ++e)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string name = expert_prefix(i, e) + proj + ".weight";
        const ShardKind split = !experts.ffn_split                   ? ShardKind::Replicated
                                : std::string(proj) == "down_proj" ? ShardKind::Row
                                                                     : ShardKind::Column;
        if (experts.holds(e))
          add(name, split);
        else
          m.ignored.push_back(name);   // another ep rank's expert
      }
  }
  return m;
}

bool qwen3_moe_layer_is_fused(const HFCheckpoint& ckpt, const Qwen3MoeConfig& cfg, int64_t layer) {
  const std::string gu = mlp_prefix(layer) + "experts.gate_up_proj", down = mlp_prefix(layer) + "experts.down_proj";
  const bool fused_gu = ckpt.has(gu), fused_down = ckpt.has(down);
  BB_CHECK(fused_gu == fused_down, "checkpoint ", ckpt.dir(), ": layer ", layer, " holds '",
           fused_gu ? gu : down, "' but not '", fused_gu ? down : gu, "' (the fused expert layout needs both)");
  if (!fused_gu) return false;
  for (int64_t e = 0; e < cfg.num_experts; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string name = expert_prefix(layer, e) + proj + ".weight";
      BB_CHECK(!ckpt.has(name), "checkpoint ", ckpt.dir(), ": layer ", layer, " holds its experts both fused ('",
               gu, "') and per expert ('", name, "')");
    }
  return true;
}

void load_qwen3_moe_weights(ParamStore& store, const HFCheckpoint& ckpt, const Qwen3MoeConfig& cfg,
                            const LayerRange& range) {
  load_moe_weights(store, ckpt, cfg, range,
                   qwen3_moe_checkpoint_mapping(cfg, qwen3_moe_held_experts(store, cfg)));
}

void load_moe_weights(ParamStore& store, const HFCheckpoint& ckpt, const Qwen3MoeConfig& cfg, const LayerRange& range,
                      const CheckpointMapping& mapping) {
  const ExpertRange experts = qwen3_moe_held_experts(store, cfg);
  std::set<int64_t> fused;
  for (int64_t i = 0; i < cfg.dense.num_layers; ++i)
    if (cfg.is_moe_layer(i) && qwen3_moe_layer_is_fused(ckpt, cfg, i)) fused.insert(i);
  if (fused.empty()) {
    load_mapped_weights(store, ckpt, mapping, range);
    return;
  }
  // Some layer is fused: the experts are sliced here (then split over etp),
  // the other tensors load (split over tp) under the same checks as load_mapped_weights.
  std::set<std::string> known(mapping.ignored.begin(), mapping.ignored.end()), loaded;
  for (const WeightRule& rule : mapping.rules) {
    known.insert(rule.hf_name);
    if (!chunk_holds(mapping, rule, range) || (is_expert_rule(rule) && fused.count(rule.layer))) continue;
    Parameter& p = param_named(store, rule.native_name);
    if (rule.optional && !ckpt.has(rule.hf_name)) {
      loaded.insert(p.name);
      continue;
    }
    check_shape(ckpt, rule.hf_name, p.full_shape);
    const Tensor full = ckpt.get(rule.hf_name);
    check_loadable_weight(rule.hf_name, full);
    p.value.copy_from(shard_of_full(p, full));
    ckpt.drop_pages(rule.hf_name);   // at most one tensor's file pages resident, as load_mapped_weights
    loaded.insert(p.name);
  }
  const int64_t e_count = cfg.num_experts, h = cfg.dense.hidden_size, f = cfg.moe_intermediate_size;
  for (int64_t i : fused) {
    const std::string gu_name = mlp_prefix(i) + "experts.gate_up_proj", down_name = mlp_prefix(i) + "experts.down_proj";
    known.insert(gu_name);
    known.insert(down_name);
    if (!range.holds_layer(i)) continue;
    check_shape(ckpt, gu_name, {e_count, 2 * f, h});
    check_shape(ckpt, down_name, {e_count, h, f});
    const Tensor gu_full = ckpt.get(gu_name), down_full = ckpt.get(down_name);
    check_loadable_weight(gu_name, gu_full);
    check_loadable_weight(down_name, down_full);
    const Tensor gu = gu_full.view({e_count * 2 * f, h});
    const Tensor down = down_full.view({e_count * h, f});
    for (int64_t e = experts.first; e < experts.first + experts.count; ++e) {
      const std::string p = expert_prefix(i, e);
      auto load = [&](const std::string& name, const Tensor& full) {
        Parameter& prm = param_named(store, name);
        prm.value.copy_from(shard_of_full(prm, full.clone()));
      };
      load(p + "gate_proj.weight", gu.narrow(e * 2 * f, f));
      load(p + "up_proj.weight", gu.narrow(e * 2 * f + f, f));
      load(p + "down_proj.weight", down.narrow(e * h, h));
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) loaded.insert(p + proj + ".weight");
    }
    ckpt.drop_pages(gu_name);
    ckpt.drop_pages(down_name);
  }
  for (const Parameter& p : store.params())   // LoRA adapters: peft_adapter.h loads them
    BB_CHECK(loaded.count(p.name) || is_lora_param(p.name), "parameter '", p.name,
             "' has no tensor in the model's checkpoint mapping");
  for (const std::string& n : ckpt.names())
    BB_CHECK(known.count(n), "checkpoint ", ckpt.dir(), " holds tensor '", n, "' that the model does not have");
}

void export_qwen3_moe_weights(ParamStore& store, ParallelContext& pc, const Qwen3MoeConfig& cfg,
                              const LayerRange& range, const WeightSink& sink) {
  export_moe_weights(store, pc, cfg, range, qwen3_moe_checkpoint_mapping(cfg, qwen3_moe_held_experts(store, cfg)),
                     sink);
}

void export_moe_weights(ParamStore& store, ParallelContext& pc, const Qwen3MoeConfig& cfg, const LayerRange& range,
                        CheckpointMapping local, const WeightSink& sink) {
  const ExpertRange held = qwen3_moe_held_experts(store, cfg);
  std::erase_if(local.rules, is_expert_rule);
  export_mapped_weights(store, pc.tp(), local, range, sink);
  dist::Communicator& ep = pc.ep();
  const char* projs[] = {"gate_proj", "up_proj", "down_proj"};
  for (int64_t i = 0; i < cfg.dense.num_layers; ++i) {
    if (!cfg.is_moe_layer(i) || !range.holds_layer(i)) continue;
    // This rank's experts whole (gathered over etp), on the parameters' device for the ep broadcast.
    std::vector<Tensor> mine;
    for (int64_t e = held.first; e < held.first + held.count; ++e)
      for (const char* proj : projs) {
        const Parameter& p = param_named(store, expert_prefix(i, e) + proj + ".weight");
        mine.push_back(gather_full(p, pc.etp()).to(p.value.device()));
      }
    for (int64_t e = 0; e < cfg.num_experts; ++e)
      for (int64_t j = 0; j < 3; ++j) {
        const std::string name = expert_prefix(i, e) + projs[j] + ".weight";
        const int owner = int(e / held.count);
        // Every expert of a layer has the same shape: this rank's first one is the template.
        const Tensor& first = mine[size_t(j)];
        Tensor t = owner == ep.rank() ? mine[size_t((e - held.first) * 3 + j)]
                                      : Tensor::empty(first.shape(), first.dtype(), first.device());
        if (ep.size() > 1) ep.broadcast(t, owner);
        sink(name, t);
      }
  }
}

}  // namespace bb
