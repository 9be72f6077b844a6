// GroupedExperts: the local experts of an MoE layer (Qwen3-MoE's SwiGLU
// experts) run as grouped GEMMs over rows sorted by expert.
//
// Expert l of the block owns rows [offsets[l], offsets[l + 1]) of its input
// (any count, 0 included). Forward: one grouped GEMM for every expert's fused
// gate|up projection into one [N, 2I] buffer, one SwiGLU over all N rows, one
// grouped GEMM for down. Backward: grouped GEMMs for dH, then SwiGLU backward
// over all rows, then the weight gradients of down and gate|up (accumulated
// into each expert's gradient) and dX.
//
// Parameters in HF's per-expert names, `<prefix>{e}.gate_proj|up_proj.weight`
// [I, H] and `<prefix>{e}.down_proj.weight` [H, I] for the global expert ids
// e of the block (ParamClass::Expert: their own parameter group); each
// expert's gate and up are kept together, so the fused [2I, H] operand is a
// view (ParamStore::fused_value / fused_grad).
//
// With expert tensor parallelism (etp > 1) each expert's FFN dimension is
// split over the etp group as a dense MLP's is over tp: gate_proj and up_proj
// column-parallel ([I / etp, H] here), down_proj row-parallel ([H, I / etp]),
// so forward returns this rank's partial sum of y, which the token dispatcher
// reduces over etp; backward's dx is partial the same way.
//
// With LoRA on the expert weights (the store's LoraConfig target_parameters)
// each expert's adapters follow its weights (moe/expert_lora.h), declared
// after all the block's experts.
//
// With recompute_activation (selective recompute's `mlp` module) forward
// drops h once down has used it, and backward rebuilds it from gate_up.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bumblebee/primitive/modules/moe/expert_lora.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

class GroupedExperts {
 public:
  // What backward needs from forward.
  struct Saved {
    Tensor x;                      // [N, H] the rows
    Tensor gate_up;                // [N, 2I]
    Tensor h;                      // [N, I] = silu(gate) * up; undefined when recomputed
    std::vector<int64_t> offsets;  // [L + 1]
  };
  // Declares experts first_expert .. first_expert + local_experts - 1, each
  // of FFN size `ffn` split over `etp` (etp.tp_rank of etp.tp_size; kind ignored).
  GroupedExperts(ParamStore& store, const std::string& prefix, int64_t first_expert, int64_t local_experts,
                 int64_t hidden, int64_t ffn, bool recompute_activation = false, ShardInfo etp = {});
  int64_t local_experts() const { return int64_t(experts_.size()); }
  // y [N, H] for x [N, H] with expert l's rows at [offsets[l], offsets[l + 1]).
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets, Saved& saved) const;
  // Returns dx [N, H]; accumulates every expert's weight gradients (none when frozen).
  Tensor backward(const Tensor& dy, Saved& saved);

 private:
  struct Expert {
    Parameter *gate, *up, *down;
  };
  std::vector<Tensor> gate_up_values() const;
  std::vector<Tensor> down_values() const;

  ParamStore* store_;
  int64_t hidden_, ffn_;   // ffn_: this etp rank's part of the FFN dimension
  bool recompute_activation_;
  std::vector<Expert> experts_;
  std::optional<ExpertLora> gate_up_lora_, down_lora_;
};

}  // namespace bb
