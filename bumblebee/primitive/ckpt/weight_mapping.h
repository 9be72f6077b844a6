// CheckpointMapping: a model package's declaration of its Hugging Face
// checkpoint, and the loading and export that follow from it.
//
// A model lists every HF tensor of the whole model (in HF order), the native
// parameter it fills, which part of the model holds it (the embedding, a
// decoder layer, the final norm and LM head) and how tensor parallelism
// splits it. From that, a chunk (a pipeline stage) loads exactly the tensors
// of its own part, each rank only its shard, from a checkpoint that may hold
// the other stages' tensors too; a tensor the model does not declare, a
// missing or mis-shaped one, or a module whose split disagrees with the
// declaration is an error naming it. Export streams the chunk's tensors in HF
// naming, gathered over tp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/modules/layer_range.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

enum class ModelPart { Embedding, Layer, Head };   // Head: the final norm and the LM head

struct WeightRule {
  std::string hf_name;
  std::string native_name;   // the parameter in the chunk's ParamStore
  ModelPart part = ModelPart::Layer;
  int64_t layer = -1;        // ModelPart::Layer: the decoder layer
  ShardKind split = ShardKind::Replicated;
  // May be absent from a checkpoint (a buffer that the HF model lacks, such as
  // the expert bias of auxiliary-loss-free balancing over a Qwen3-MoE
  // checkpoint): then the parameter keeps its initial value. Always exported.
  bool optional = false;
};

struct CheckpointMapping {
  std::vector<WeightRule> rules;
  // The embedding is tied to the LM head: the last stage holds a copy of it.
  bool tied_embedding = false;
  // HF tensors that may be present and are ignored (transformers writes
  // lm_head.weight for some tied models).
  std::vector<std::string> ignored;
};

// Whether the chunk holding `range` holds the rule's tensor.
bool chunk_holds(const CheckpointMapping& mapping, const WeightRule& rule, const LayerRange& range);

void load_mapped_weights(ParamStore& store, const HFCheckpoint& ckpt, const CheckpointMapping& mapping,
                         const LayerRange& range);

using WeightSink = std::function<void(const std::string& hf_name, const Tensor& full)>;

// Calls sink(hf_name, full tensor on the parameter's device, in the parameter
// dtype; gather_full's, often a view of the parameter) for every tensor
// this chunk owns, in the mapping's order (a tied copy on the last stage is
// the first stage's to export). Collective over the tp group.
void export_mapped_weights(ParamStore& store, TensorParallel& tp, const CheckpointMapping& mapping,
                           const LayerRange& range, const WeightSink& sink);

}  // namespace bb
