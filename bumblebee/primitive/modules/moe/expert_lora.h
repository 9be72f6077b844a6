// LoRA on the grouped experts' fused weights, HF peft's `target_parameters`
// (ParamWrapper over transformers' Qwen3MoeExperts / DeepseekV3Experts):
//
//   gate_up_proj [E, 2I, H]:  W_e' = W_e + s B_e A_e,   A_e [r, H], B_e [2I, r]
//   down_proj    [E, H, I]:   W_e' = W_e + s B_e A_e,   A_e [r, I], B_e [H, r]
//
// one adapter per expert on the fused gate|up rows (not one per gate and up)
// and one on down. Here expert e's factors are its own parameters,
// `<prefix>{e}.gate_up_proj.lora_A.weight` and so on (ParamClass::Expert:
// each ep rank holds its experts' adapters, reduced over the expert-data-
// parallel group as the experts are); peft stores them fused over experts
// (peft_adapter.h). Each expert's rows add s (x A_e^T) B_e^T to the base
// GEMM's output: two grouped GEMMs forward, four backward, the [N, r]
// product recomputed. peft's ParamWrapper refuses dropout and DoRA, so do
// these (lora.h's check), and so does expert tensor parallelism here.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/primitive/modules/lora.h"

namespace bb {

// The adapters of one expert projection over a block's local experts.
class ExpertLora {
 public:
  // Declares A [r, in] and B [out, r] for each expert `first .. first + count - 1`
  // of `<prefix>{e}.<param>` (param: gate_up_proj or down_proj).
  ExpertLora(ParamStore& store, const std::string& prefix, const std::string& param, int64_t first, int64_t count,
             int64_t in, int64_t out, const LoraConfig& cfg);
  // y[rows of e] += s (x A_e^T) B_e^T.
  void forward(const Tensor& x, const std::vector<int64_t>& offsets, Tensor& y) const;
  // With dy the gradient of that y: dA_e += s (dy B_e)^T x, dB_e += s dy^T (x A_e^T)
  // (skipped when frozen) and dx += s (dy B_e) A_e.
  void backward(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, Tensor& dx);

 private:
  std::vector<Parameter*> a_, b_;
  double scaling_;
  std::vector<Tensor> values(const std::vector<Parameter*>& ps) const;
};

}  // namespace bb
