// Loading and export of a chunk's weights through its model's CheckpointMapping.
#include "bumblebee/primitive/ckpt/weight_mapping.h"

#include <algorithm>
#include <set>

#include "bumblebee/primitive/ckpt/hf_weights.h"
#include "bumblebee/primitive/modules/lora.h"

namespace bb {

namespace {
const char* split_name(ShardKind k) {
  switch (k) {
    case ShardKind::Replicated: return "replicated";
    case ShardKind::Column: return "column-parallel";
    case ShardKind::Row: return "row-parallel";
    case ShardKind::Vocab: return "vocab-parallel";
  }
  return "?";
}

// The parameter a rule fills, checked against what the module declared.
Parameter& mapped_param(ParamStore& store, const WeightRule& rule) {
  Parameter* p = store.find(rule.native_name);
  BB_CHECK(p, "the checkpoint mapping names parameter '", rule.native_name, "' (HF '", rule.hf_name,
           "'), which this chunk does not have");
  BB_CHECK(p->shard == rule.split, "parameter '", p->name, "' is ", split_name(p->shard),
           " in the model but ", split_name(rule.split), " in its checkpoint mapping");
  return *p;
}
}  // namespace

bool chunk_holds(const CheckpointMapping& mapping, const WeightRule& rule, const LayerRange& range) {
  switch (rule.part) {
    case ModelPart::Embedding: return range.pre_process || (mapping.tied_embedding && range.post_process);
    case ModelPart::Layer: return range.holds_layer(rule.layer);
    case ModelPart::Head: return range.post_process;
  }
  return false;
}

void load_mapped_weights(ParamStore& store, const HFCheckpoint& ckpt, const CheckpointMapping& mapping,
                         const LayerRange& range) {
  std::set<std::string> known(mapping.ignored.begin(), mapping.ignored.end());
  std::set<std::string> loaded;
  for (const WeightRule& rule : mapping.rules) {
    known.insert(rule.hf_name);
    if (!chunk_holds(mapping, rule, range)) continue;
    Parameter& p = mapped_param(store, rule);
    if (rule.optional && !ckpt.has(rule.hf_name)) {
      loaded.insert(p.name);
      continue;
    }
    BB_CHECK(ckpt.has(rule.hf_name), "checkpoint ", ckpt.dir(), " lacks tensor '", rule.hf_name, "'");
    BB_CHECK(ckpt.shape(rule.hf_name) == p.full_shape, "checkpoint tensor '", rule.hf_name, "' has shape ",
             shape_str(ckpt.shape(rule.hf_name)), ", the model expects ", shape_str(p.full_shape));
    const Tensor full = ckpt.get(rule.hf_name);
    check_loadable_weight(rule.hf_name, full);
    p.value.copy_from(shard_of_full(p, full));
    // The view is done with: its file pages leave the resident set, so a rank
    // holds at most one full tensor's pages besides its own shard.
    ckpt.drop_pages(rule.hf_name);
    loaded.insert(p.name);
  }
  // LoRA adapters are not part of the base checkpoint (peft_adapter.h loads them).
  for (const Parameter& p : store.params())
    BB_CHECK(loaded.count(p.name) || is_lora_param(p.name), "parameter '", p.name, "' has no tensor in the model's checkpoint mapping");
  for (const std::string& n : ckpt.names())
    BB_CHECK(known.count(n), "checkpoint ", ckpt.dir(), " holds tensor '", n, "' that the model does not have");
}

void export_mapped_weights(ParamStore& store, TensorParallel& tp, const CheckpointMapping& mapping,
                           const LayerRange& range, const WeightSink& sink) {
  for (const WeightRule& rule : mapping.rules) {
    if (!chunk_holds(mapping, rule, range)) continue;
    if (rule.part == ModelPart::Embedding && !range.pre_process) continue;   // the first stage exports it
    sink(rule.hf_name, gather_full(mapped_param(store, rule), tp));
  }
}

}  // namespace bb
