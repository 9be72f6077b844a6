// TopKRouter forward (logits, device routing, sorted rows) and backward.
#include "bumblebee/primitive/modules/moe/topk_router.h"

#include "bumblebee/primitive/modules/linear.h"

namespace bb {

DType router_stat_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

TopKRouter::TopKRouter(ParamStore& store, const std::string& prefix, const TopKRouterConfig& cfg)
    : cfg_(cfg), weight_(&store.add(prefix + "weight", {cfg.num_experts, cfg.hidden}, {ShardKind::Replicated, 0, 1})) {
  BB_CHECK(cfg.routing.top_k >= 1 && cfg.routing.top_k <= cfg.num_experts, "num_experts_per_tok ", cfg.routing.top_k,
           " must lie in [1, num_experts = ", cfg.num_experts, "]");
  if (cfg.routing.score == ops::MoeScore::Sigmoid || cfg.expert_bias)
    bias_ = &store.add(prefix + "e_score_correction_bias", {cfg.num_experts}, {ShardKind::Replicated, 0, 1},
                       InitKind::Zeros, ParamClass::Buffer);
}

Routing TopKRouter::forward(const Tensor& x, const Tensor& forced_experts, bool z_loss) const {
  const int64_t e_count = cfg_.num_experts, k = cfg_.routing.top_k;
  const Device dev = x.device();
  const DType st = router_stat_dtype(x.dtype());
  Routing r;
  r.tokens = x.size(0);
  r.num_experts = e_count;
  r.top_k = k;
  r.logits = linear_forward(x, weight_->value);
  r.scores = Tensor::empty({r.tokens, e_count}, st, dev);
  r.experts = Tensor::empty({r.tokens, k}, DType::I64, dev);
  r.weights = Tensor::empty({r.tokens, k}, st, dev);
  const Tensor bias = bias_ ? bias_->value.to(st) : Tensor();
  ops::moe_router_forward(r.logits, cfg_.routing, bias, forced_experts, r.scores, r.experts, r.weights);
  const int64_t n = r.tokens * k;
  r.token_of_row = Tensor::empty({n}, DType::I64, dev);
  r.slot_of_row = Tensor::empty({n}, DType::I64, dev);
  r.counts = Tensor::empty({e_count}, DType::I64, dev);
  ops::moe_sort_rows(r.experts, e_count, r.token_of_row, r.slot_of_row, r.counts);
  r.rows_by_token = Tensor::empty({r.tokens, k}, DType::I64, dev);
  ops::moe_rows_by_token(r.token_of_row, r.slot_of_row, r.rows_by_token);
  r.row_weights = Tensor::empty({n}, st, dev);
  ops::moe_row_weights(r.weights, r.token_of_row, r.slot_of_row, r.row_weights);
  if (z_loss) {
    r.lse = Tensor::empty({r.tokens}, st, dev);
    ops::moe_router_lse(r.logits, r.lse);
  }
  return r;
}

void TopKRouter::backward(const Routing& r, const Tensor& drow_weights, const Tensor& dscores, const Tensor& x,
                          Tensor& dx, double z_scale) const {
  Tensor dweights = Tensor::empty(r.weights.shape(), r.weights.dtype(), x.device());
  ops::moe_gather_row_grads(drow_weights, r.token_of_row, r.slot_of_row, dweights);
  Tensor dlogits = Tensor::empty(r.logits.shape(), x.dtype(), x.device());
  ops::moe_router_backward(dweights, dscores, r.logits, r.scores, r.experts, r.weights, cfg_.routing, dlogits);
  if (r.lse.defined() && z_scale != 0.0 && r.tokens > 0)
    ops::moe_router_z_loss_backward(r.logits, r.lse, z_scale / double(r.tokens), dlogits);
  linear_backward(dlogits, x, weight_->value, weight_->grad, dx, true, grad_write_beta(*weight_));
}

void RowCountCopy::start(const Routing& r) {
  const Device dev = r.counts.device();
  if (!stream_) stream_ = std::make_unique<HostCopyStream>(dev);
  if (!host_.defined() || host_.numel() != r.counts.numel()) {
    host_ = Tensor::empty(r.counts.shape(), DType::I64);
    if (dev.is_cuda()) host_.storage()->relocate(Device::cpu(), true);
  }
  stream_->wait_for_compute();
  stream_->copy(host_, r.counts);
}

void RowCountCopy::finish(Routing& r) {
  stream_->synchronize();
  const int64_t* c = host_.data<int64_t>();
  r.rows_per_expert.assign(c, c + host_.numel());
}

}  // namespace bb
