// SwiGLU MLP forward and backward.
#include "bumblebee/primitive/modules/mlp.h"

#include "bumblebee/ops/ops.h"

namespace bb {

SwiGLUMLP::SwiGLUMLP(ParamStore& store, const std::string& prefix, int64_t hidden, int64_t ffn, ParallelContext& pc,
                     bool recompute_activation)
    : store_(&store),
      tp_(&pc.tp()),
      gate_proj_(store, prefix + "gate_proj.weight", hidden, ffn, pc.tp(), false),
      up_proj_(store, prefix + "up_proj.weight", hidden, ffn, pc.tp(), false),
      down_proj_(store, prefix + "down_proj.weight", ffn, hidden, pc.tp()),
      recompute_activation_(recompute_activation) {
  BB_CHECK(ffn % pc.tp().size() == 0, "intermediate_size ", ffn, " is not divisible by tp ", pc.tp().size());
  store.keep_together(gate_proj_.weight(), up_proj_.weight());
  gate_proj_.declare_lora(store, pc.tp());
  up_proj_.declare_lora(store, pc.tp());
}

Tensor SwiGLUMLP::forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  auto s = std::make_unique<Saved>();
  s->x_full = tp_->enter(x);
  s->gate_up = linear_forward(s->x_full, store_->fused_value(gate_proj_.weight(), up_proj_.weight()));
  if (LoraAdapter* a = gate_proj_.lora()) a->forward(s->x_full, s->gate_up, 0, seq.lora_dropout);
  if (LoraAdapter* a = up_proj_.lora()) a->forward(s->x_full, s->gate_up, gate_proj_.local_out(), seq.lora_dropout);
  s->h = Tensor::empty({s->gate_up.size(0), gate_proj_.local_out()}, x.dtype(), x.device());
  ops::swiglu_forward(s->gate_up, s->h);
  Tensor y = down_proj_.forward(s->h, seq.lora_dropout);
  if (recompute_activation_) s->h = Tensor();
  state = std::move(s);
  return y;
}

Tensor SwiGLUMLP::backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) {
  BB_CHECK(state, "SwiGLUMLP::backward without a saved forward");
  Saved& s = static_cast<Saved&>(*state);
  if (!s.h.defined()) {   // selective recompute of the activation
    s.h = Tensor::empty({s.gate_up.size(0), gate_proj_.local_out()}, s.gate_up.dtype(), s.gate_up.device());
    ops::swiglu_forward(s.gate_up, s.h);
  }
  Tensor dh = down_proj_.backward(dy, s.h, seq.lora_dropout);
  Tensor d_gate_up = Tensor::empty(s.gate_up.shape(), dy.dtype(), dy.device());
  ops::swiglu_backward(dh, s.gate_up, d_gate_up);
  if (LoraAdapter* a = gate_proj_.lora()) d_gate_up = a->output_grad(d_gate_up, s.x_full, 0);
  if (LoraAdapter* a = up_proj_.lora()) d_gate_up = a->output_grad(d_gate_up, s.x_full, gate_proj_.local_out());
  Tensor dw = store_->fused_grad(gate_proj_.weight(), up_proj_.weight());
  Tensor dx_full;
  linear_backward(d_gate_up, s.x_full, store_->fused_value(gate_proj_.weight(), up_proj_.weight()), dw, dx_full,
                  false, store_->fused_grad_beta(gate_proj_.weight(), up_proj_.weight()));
  if (LoraAdapter* a = gate_proj_.lora()) a->backward(d_gate_up, s.x_full, dx_full, 0, seq.lora_dropout);
  if (LoraAdapter* a = up_proj_.lora()) a->backward(d_gate_up, s.x_full, dx_full, gate_proj_.local_out(), seq.lora_dropout);
  state.reset();
  return tp_->enter_backward(dx_full);
}

bool SwiGLUMLP::drop_input(BlockState& state) {
  static_cast<Saved&>(state).x_full = Tensor();
  return true;
}

void SwiGLUMLP::restore_input(const Tensor& x, BlockState& state) {
  static_cast<Saved&>(state).x_full = tp_->enter(x);
}

BlockFactory swiglu_mlp(int64_t hidden, int64_t ffn, ParallelContext& pc, bool recompute_activation) {
  return [hidden, ffn, &pc, recompute_activation](ParamStore& store,
                                                  const std::string& prefix) -> std::unique_ptr<Block> {
    return std::make_unique<SwiGLUMLP>(store, prefix, hidden, ffn, pc, recompute_activation);
  };
}

}  // namespace bb
