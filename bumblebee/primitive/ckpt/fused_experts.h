// FusedExpertSink: writes an MoE layer's routed experts in the fused layout
// transformers 5 saves with save_original_format=False,
//   {prefix}gate_up_proj  [E, 2I, H]  expert e's gate_proj rows, then its up_proj rows
//   {prefix}down_proj     [E, H, I]
// (prefix "model.layers.{i}.mlp.experts."), from the per-expert tensors
// {prefix}{e}.{gate,up,down}_proj.weight a model exports. Export follows the
// layout the source checkpoint used, layer by layer, so HF -> bumblebee -> HF
// gives back the tensors the source held; a model exports per expert and this
// sink, between it and the writer, regroups.
//
// Host memory: the experts of one layer until its last one arrives (the two
// fused tensors, which the writer needs whole anyway); other tensors pass
// through as they come.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/weight_mapping.h"

namespace bb {

// The expert prefixes of `ckpt`'s fused layers, with their expert counts.
std::map<std::string, int64_t> fused_expert_layers(const HFCheckpoint& ckpt);

class FusedExpertSink {
 public:
  FusedExpertSink(std::map<std::string, int64_t> fused_layers, WeightSink out);
  void operator()(const std::string& name, const Tensor& t);
  // Errors naming the layer and the missing tensor when a fused layer did not arrive whole.
  void finish() const;

 private:
  struct Pending {
    int64_t num_experts;
    std::map<std::string, Tensor> parts;   // "{e}.{proj}" -> the expert's tensor, on the host
  };
  void emit(const std::string& prefix, Pending& layer);

  std::map<std::string, Pending> layers_;
  WeightSink out_;
};

}  // namespace bb
