// LMHead: chunked vocab-parallel cross entropy.
#include "bumblebee/primitive/modules/lm_head.h"

#include <algorithm>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/rmsnorm.h"

namespace bb {

LMHead::LMHead(Parameter& weight, ParallelContext& pc, double temperature, int64_t chunk_tokens)
    : weight_(&weight), tp_(&pc.tp()), inv_temperature_(1.0 / temperature), chunk_tokens_(chunk_tokens) {
  BB_CHECK(temperature > 0, "temperature must be positive, got ", temperature);
  BB_CHECK(chunk_tokens >= 0, "backend.lm_head_chunk_tokens must be >= 0, got ", chunk_tokens);
}

int64_t LMHead::chunk_rows(int64_t T, int64_t V) const {
  if (T <= 0) return 1;
  if (chunk_tokens_ > 0) return std::min(chunk_tokens_, T);
  // Even chunks: 8192 tokens over 151936 logits make two of 4096, not 7067 + 1125.
  const int64_t max_rows = std::max<int64_t>(kAutoChunkLogits / std::max<int64_t>(V, 1), 1);
  const int64_t chunks = (T + max_rows - 1) / max_rows;
  return (T + chunks - 1) / chunks;
}

Tensor LMHead::run(const Tensor& h_full, const Tensor& labels, const Tensor& dloss, Tensor* dh_full, Tensor* entropy,
                   const Tensor& dentropy) {
  const int64_t T = h_full.size(0);
  const int64_t V = weight_->shard_valid;
  const DType act = h_full.dtype(), st = stat_dtype(act);
  const Device dev = h_full.device();
  Tensor w = weight_->value.narrow(0, V);
  Tensor dw = weight_->requires_grad() ? weight_->grad.narrow(0, V) : Tensor();
  Tensor loss = Tensor::empty({T}, st, dev);
  // The backward of an entropy loss needs the entropy (its sum_v p_v z_v) again.
  Tensor ent = entropy || dentropy.defined() ? Tensor::empty({T}, st, dev) : Tensor();
  const int64_t chunk = chunk_rows(T, V);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    Tensor h = h_full.narrow(t0, n);
    Tensor lab = labels.narrow(t0, n);
    Tensor logits = Tensor::empty({n, V}, act, dev);
    ops::matmul(h, false, w, true, logits, inv_temperature_, 0.0);
    Tensor row_max = Tensor::empty({n}, st, dev), sumexp = Tensor::empty({n}, st, dev);
    Tensor target = Tensor::empty({n}, st, dev), lse = Tensor::empty({n}, st, dev);
    if (tp_->size() == 1) {
      // The whole vocabulary is here: one read of the logits gives all three.
      ops::logits_softmax_stats(logits, lab, weight_->shard_begin, row_max, sumexp, target);
    } else {
      // The sums need the group's max first (partial sums would need rescaling).
      ops::logits_row_max(logits, row_max);
      tp_->group().all_reduce(row_max, dist::ReduceOp::Max);
      ops::logits_sumexp_target(logits, row_max, lab, weight_->shard_begin, sumexp, target);
      tp_->group().all_reduce(sumexp);
      tp_->group().all_reduce(target);
    }
    Tensor loss_chunk = loss.narrow(t0, n);
    ops::cross_entropy_loss(row_max, sumexp, target, lse, loss_chunk);
    if (ent.defined()) {
      Tensor zexp = Tensor::empty({n}, st, dev), ent_chunk = ent.narrow(t0, n);
      ops::logits_zexp_sum(logits, row_max, zexp);
      if (tp_->size() > 1) tp_->group().all_reduce(zexp);
      ops::entropy_from_sums(lse, sumexp, zexp, ent_chunk);
    }
    if (!dh_full) continue;
    if (dentropy.defined())
      ops::cross_entropy_entropy_backward(logits, lab, weight_->shard_begin, lse, ent.narrow(t0, n),
                                          dloss.narrow(t0, n), dentropy.narrow(t0, n), logits);
    else
      ops::cross_entropy_backward(logits, lab, weight_->shard_begin, lse, dloss.narrow(t0, n), logits);
    Tensor dh = dh_full->narrow(t0, n);
    ops::matmul(logits, false, w, false, dh, inv_temperature_, 0.0);
    // The first chunk may overwrite a pending gradient: the padded vocabulary
    // rows past V, which no write reaches, stay the zeros they were allocated as.
    if (dw.defined()) ops::matmul(logits, true, h, false, dw, inv_temperature_, t0 == 0 ? grad_write_beta(*weight_) : 1.0);
  }
  if (entropy) *entropy = ent;
  return loss;
}

Tensor LMHead::full_logits(const Tensor& h) {
  Tensor h_full = tp_->enter(h);
  const int64_t T = h_full.size(0), rows = weight_->local_shape[0], V = weight_->full_shape[0];
  // Transposed logits [rows, T] per rank stack along dim 0 into the padded vocabulary.
  Tensor local_t = Tensor::empty({rows, T}, h.dtype(), h.device());
  ops::matmul(weight_->value, false, h_full, true, local_t, inv_temperature_, 0.0);
  Tensor all_t = local_t;
  if (tp_->size() > 1) {
    all_t = Tensor::empty({rows * tp_->size(), T}, h.dtype(), h.device());
    tp_->group().all_gather(local_t, all_t);
  }
  const std::vector<double> lt = all_t.to_doubles();
  std::vector<double> out(static_cast<size_t>(T * V));
  for (int64_t v = 0; v < V; ++v)
    for (int64_t t = 0; t < T; ++t) out[size_t(t * V + v)] = lt[size_t(v * T + t)];
  return Tensor::from_doubles(out, {T, V}, DType::F64);
}

Tensor LMHead::forward(const Tensor& h, const Tensor& labels, const Tensor& dloss, Saved& s, bool entropy) {
  Tensor h_full = tp_->enter(h);
  s.labels = labels;
  Tensor* ent = entropy ? &s.entropy : nullptr;
  if (!dloss.defined()) {
    s.h_full = h_full;
    return run(h_full, labels, Tensor(), nullptr, ent, Tensor());
  }
  Tensor dh_full = Tensor::empty(h_full.shape(), h.dtype(), h.device());
  Tensor loss = run(h_full, labels, dloss, &dh_full, ent, Tensor());
  s.dh = tp_->enter_backward(dh_full);
  return loss;
}

Tensor LMHead::backward(const Tensor& dloss, Saved& s) {
  if (s.dh.defined()) {
    BB_CHECK(!s.dentropy.defined(), "LMHead: an entropy gradient after a forward that folded in the loss gradient");
    return s.dh;
  }
  BB_CHECK(s.h_full.defined(), "LMHead::backward without a saved forward");
  Tensor dh_full = Tensor::empty(s.h_full.shape(), s.h_full.dtype(), s.h_full.device());
  run(s.h_full, s.labels, dloss, &dh_full, nullptr, s.dentropy);
  return tp_->enter_backward(dh_full);
}

}  // namespace bb
