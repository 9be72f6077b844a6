// GroupedExperts forward and backward: grouped GEMMs around one SwiGLU.
#include "bumblebee/primitive/modules/moe/grouped_experts.h"

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/lora.h"

namespace bb {

GroupedExperts::GroupedExperts(ParamStore& store, const std::string& prefix, int64_t first_expert,
                               int64_t local_experts, int64_t hidden, int64_t ffn, bool recompute_activation,
                               ShardInfo etp)
    : store_(&store), hidden_(hidden), ffn_(ffn / etp.tp_size), recompute_activation_(recompute_activation) {
  BB_CHECK(ffn % etp.tp_size == 0, "expert tensor parallelism: moe_intermediate_size ", ffn,
           " is not divisible by backend.parallel.etp = ", etp.tp_size);
  const bool split = etp.tp_size > 1;
  const ShardInfo column{split ? ShardKind::Column : ShardKind::Replicated, etp.tp_rank, etp.tp_size};
  const ShardInfo row{split ? ShardKind::Row : ShardKind::Replicated, etp.tp_rank, etp.tp_size};
  for (int64_t e = first_expert; e < first_expert + local_experts; ++e) {
    const std::string p = prefix + std::to_string(e) + ".";
    Expert x;
    x.gate = &store.add(p + "gate_proj.weight", {ffn, hidden}, column, InitKind::Normal, ParamClass::Expert);
    x.up = &store.add(p + "up_proj.weight", {ffn, hidden}, column, InitKind::Normal, ParamClass::Expert);
    x.down = &store.add(p + "down_proj.weight", {hidden, ffn}, row, InitKind::Normal, ParamClass::Expert);
    store.keep_together(*x.gate, *x.up);
    experts_.push_back(x);
  }
  // peft's target_modules reach nn.Linear modules only, never the fused experts.
  const LoraConfig* lora = store.lora();
  if (!lora || lora->target_parameters.empty()) return;
  BB_CHECK(!split, "peft.target_parameters (LoRA on the expert weights) with backend.parallel.etp = ", etp.tp_size,
           " > 1 is not supported; use etp = 1");
  if (lora->targets_expert_parameter("gate_up_proj"))
    gate_up_lora_.emplace(store, prefix, "gate_up_proj", first_expert, local_experts, hidden, 2 * ffn, *lora);
  if (lora->targets_expert_parameter("down_proj"))
    down_lora_.emplace(store, prefix, "down_proj", first_expert, local_experts, ffn, hidden, *lora);
}

std::vector<Tensor> GroupedExperts::gate_up_values() const {
  std::vector<Tensor> w;
  for (const Expert& e : experts_) w.push_back(store_->fused_value(*e.gate, *e.up));
  return w;
}

std::vector<Tensor> GroupedExperts::down_values() const {
  std::vector<Tensor> w;
  for (const Expert& e : experts_) w.push_back(e.down->value);
  return w;
}

Tensor GroupedExperts::forward(const Tensor& x, const std::vector<int64_t>& offsets, Saved& saved) const {
  const int64_t n = x.size(0);
  saved.x = x;
  saved.offsets = offsets;
  saved.gate_up = Tensor::empty({n, 2 * ffn_}, x.dtype(), x.device());
  ops::grouped_gemm(x, gate_up_values(), true, offsets, saved.gate_up);
  if (gate_up_lora_) gate_up_lora_->forward(x, offsets, saved.gate_up);
  saved.h = Tensor::empty({n, ffn_}, x.dtype(), x.device());
  ops::swiglu_forward(saved.gate_up, saved.h);
  Tensor y = Tensor::empty({n, hidden_}, x.dtype(), x.device());
  ops::grouped_gemm(saved.h, down_values(), true, offsets, y);
  if (down_lora_) down_lora_->forward(saved.h, offsets, y);
  if (recompute_activation_) saved.h = Tensor();
  return y;
}

Tensor GroupedExperts::backward(const Tensor& dy, Saved& saved) {
  const int64_t n = dy.size(0);
  if (!saved.h.defined()) {   // selective recompute of the activation
    saved.h = Tensor::empty({n, ffn_}, saved.gate_up.dtype(), saved.gate_up.device());
    ops::swiglu_forward(saved.gate_up, saved.h);
  }
  const std::vector<Tensor> gate_up = gate_up_values();
  Tensor dh = Tensor::empty({n, ffn_}, dy.dtype(), dy.device());
  ops::grouped_gemm(dy, down_values(), false, saved.offsets, dh);
  if (down_lora_) down_lora_->backward(dy, saved.h, saved.offsets, dh);
  Tensor dgate_up = Tensor::empty({n, 2 * ffn_}, dy.dtype(), dy.device());
  ops::swiglu_backward(dh, saved.gate_up, dgate_up);
  // Experts share one parameter group: all are frozen (no gradients) or none.
  if (!experts_.empty() && experts_.front().down->grad.defined()) {
    std::vector<Tensor> ddown, dgu;
    std::vector<Parameter*> down, gate_up;
    for (const Expert& e : experts_) {
      ddown.push_back(e.down->grad);
      dgu.push_back(store_->fused_grad(*e.gate, *e.up));
      down.push_back(e.down);
      gate_up.insert(gate_up.end(), {e.gate, e.up});
    }
    // An expert without rows gets beta * its gradient: zeros on an overwrite.
    ops::grouped_gemm_weight_grad(dy, saved.h, saved.offsets, ddown, 1.0, grad_write_beta(down));
    ops::grouped_gemm_weight_grad(dgate_up, saved.x, saved.offsets, dgu, 1.0, grad_write_beta(gate_up));
  }
  Tensor dx = Tensor::empty({n, hidden_}, dy.dtype(), dy.device());
  ops::grouped_gemm(dgate_up, gate_up, false, saved.offsets, dx);
  if (gate_up_lora_) gate_up_lora_->backward(dgate_up, saved.x, saved.offsets, dx);
  return dx;
}

}  // namespace bb
