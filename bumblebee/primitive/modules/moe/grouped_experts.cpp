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
    for (const char* m : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
      BB_CHECK(!store.lora() || !store.lora()->targets(p + m), "peft.target_modules targets the MoE expert weight '",
               p, m, "': LoRA on experts is not supported yet; target the attention projections");
    x.gate = &store.add(p + "gate_proj.weight", {ffn, hidden}, column, InitKind::Normal, ParamClass::Expert);
    x.up = &store.add(p + "up_proj.weight", {ffn, hidden}, column, InitKind::Normal, ParamClass::Expert);
    x.down = &store.add(p + "down_proj.weight", {hidden, ffn}, row, InitKind::Normal, ParamClass::Expert);
    store.keep_together(*x.gate, *x.up);
    experts_.push_back(x);
  }
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
  saved.h = Tensor::empty({n, ffn_}, x.dtype(), x.device());
  ops::swiglu_forward(saved.gate_up, saved.h);
  Tensor y = Tensor::empty({n, hidden_}, x.dtype(), x.device());
  ops::grouped_gemm(saved.h, down_values(), true, offsets, y);
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
  Tensor dgate_up = Tensor::empty({n, 2 * ffn_}, dy.dtype(), dy.device());
  ops::swiglu_backward(dh, saved.gate_up, dgate_up);
  // Experts share one parameter group: all are frozen (no gradients) or none.
  if (!experts_.empty() && experts_.front().down->grad.defined()) {
    std::vector<Tensor> ddown, dgu;
    for (const Expert& e : experts_) {
      ddown.push_back(e.down->grad);
      dgu.push_back(store_->fused_grad(*e.gate, *e.up));
    }
    ops::grouped_gemm_weight_grad(dy, saved.h, saved.offsets, ddown);
    ops::grouped_gemm_weight_grad(dgate_up, saved.x, saved.offsets, dgu);
  }
  Tensor dx = Tensor::empty({n, hidden_}, dy.dtype(), dy.device());
  ops::grouped_gemm(dgate_up, gate_up, false, saved.offsets, dx);
  return dx;
}

}  // namespace bb
