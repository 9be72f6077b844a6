// Ring attention forward and backward over the cp communicator.
#include "bumblebee/primitive/parallel/ring_attention.h"

#include <memory>
#include <vector>

#include "bumblebee/ops/ops.h"

namespace bb {
namespace {

enum class Half { A, B };

Tensor half_of(const Tensor& t, Half h) {
  const int64_t n = t.size(0) / 2;
  return t.narrow(h == Half::A ? 0 : n, n);
}

// One partial attention of a step: which local q half reads which half of the
// visiting K/V, and whether the diagonal is masked.
struct Partial {
  Half q, kv;
  ops::AttentionMask mask;
};

// The partials rank `me` owes the K/V of rank `owner` (ring_attention.h).
std::vector<Partial> partials_for(int me, int owner) {
  using ops::AttentionMask;
  if (owner == me)
    return {{Half::A, Half::A, AttentionMask::Causal}, {Half::B, Half::B, AttentionMask::Causal},
            {Half::B, Half::A, AttentionMask::None}};
  if (owner < me) return {{Half::A, Half::A, AttentionMask::None}, {Half::B, Half::A, AttentionMask::None}};
  return {{Half::B, Half::A, AttentionMask::None}, {Half::B, Half::B, AttentionMask::None}};
}

ops::AttentionSpans spans_of(const RingAttentionLayout& layout, ops::AttentionMask mask) {
  return {layout.cu_half, layout.cu_half, layout.max_half, layout.max_half, mask};
}

int next_rank(const dist::Communicator& cp) { return (cp.rank() + 1) % cp.size(); }
int prev_rank(const dist::Communicator& cp) { return (cp.rank() + cp.size() - 1) % cp.size(); }

// Sends `send` to the next rank and receives the previous rank's into `recv`, started now.
std::unique_ptr<dist::PendingCollective> rotate(dist::Communicator& cp, const std::vector<Tensor>& send,
                                                std::vector<Tensor>& recv) {
  std::vector<dist::P2POp> ops;
  for (const Tensor& t : send) ops.push_back(dist::P2POp::send(t, next_rank(cp)));
  for (Tensor& t : recv) ops.push_back(dist::P2POp::recv(t, prev_rank(cp)));
  return cp.batch_isend_irecv(ops);
}

std::vector<Tensor> empty_like(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(Tensor::empty(t.shape(), t.dtype(), t.device()));
  return out;
}

void check_layout(const Tensor& q, const Tensor& k, const RingAttentionLayout& layout, const dist::Communicator& cp) {
  BB_CHECK(q.size(0) % 2 == 0 && k.size(0) == q.size(0), "ring attention over cp ", cp.size(), ": q has ",
           q.size(0), " tokens and k ", k.size(0), "; both must be the same even count (two zigzag halves)");
  BB_CHECK(layout.cu_half.dim() == 1 && layout.cu_half.numel() >= 1, "ring attention: cu_half must be [S+1]");
}

}  // namespace

void ring_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const RingAttentionLayout& layout,
                            double scale, dist::Communicator& cp, Tensor& out, Tensor& lse) {
  check_layout(q, k, layout, cp);
  const int me = cp.rank(), n = cp.size();
  std::vector<Tensor> kv{k, v};
  Tensor part_out = Tensor::empty(half_of(out, Half::A).shape(), out.dtype(), out.device());   // [T/2, H, Dv]
  Tensor part_lse = Tensor::empty(half_of(lse, Half::A).shape(), lse.dtype(), lse.device());
  for (int step = 0; step < n; ++step) {
    std::vector<Tensor> next;
    std::unique_ptr<dist::PendingCollective> transfer;
    if (step + 1 < n) {
      next = empty_like(kv);
      transfer = rotate(cp, kv, next);
    }
    const int owner = (me - step + n) % n;
    for (const Partial& p : partials_for(me, owner)) {
      Tensor qh = half_of(q, p.q), kh = half_of(kv[0], p.kv), vh = half_of(kv[1], p.kv);
      Tensor oh = half_of(out, p.q), lh = half_of(lse, p.q);
      // The diagonal's causal partials are the first to reach each half: they start the running result.
      if (owner == me && p.mask == ops::AttentionMask::Causal) {
        ops::attention_forward(qh, kh, vh, spans_of(layout, p.mask), scale, oh, lh);
      } else {
        ops::attention_forward(qh, kh, vh, spans_of(layout, p.mask), scale, part_out, part_lse);
        ops::attention_merge(oh, lh, part_out, part_lse);
      }
    }
    if (transfer) {
      transfer->wait();
      kv = std::move(next);
    }
  }
}

void ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const RingAttentionLayout& layout, double scale,
                             dist::Communicator& cp, Tensor& dq, Tensor& dk, Tensor& dv) {
  check_layout(q, k, layout, cp);
  const int me = cp.rank(), n = cp.size();
  std::vector<Tensor> kv{k, v};
  // dK/dV of the K/V this rank holds, accumulated by every rank they visit.
  std::vector<Tensor> dkv{Tensor::zeros(k.shape(), dk.dtype(), dk.device()),
                          Tensor::zeros(v.shape(), dv.dtype(), dv.device())};
  Tensor dq_acc = Tensor::zeros(q.shape(), dq.dtype(), dq.device());
  Tensor dq_part = Tensor::empty(half_of(q, Half::A).shape(), dq.dtype(), dq.device());
  Tensor dk_part = Tensor::empty(half_of(k, Half::A).shape(), dk.dtype(), dk.device());
  Tensor dv_part = Tensor::empty(half_of(v, Half::A).shape(), dv.dtype(), dv.device());
  for (int step = 0; step < n; ++step) {
    std::vector<Tensor> next;
    std::unique_ptr<dist::PendingCollective> transfer;
    if (step + 1 < n) {
      next = empty_like(kv);
      transfer = rotate(cp, kv, next);
    }
    const int owner = (me - step + n) % n;
    for (const Partial& p : partials_for(me, owner)) {
      ops::attention_backward(half_of(dout, p.q), half_of(q, p.q), half_of(kv[0], p.kv), half_of(kv[1], p.kv),
                              half_of(out, p.q), half_of(lse, p.q), spans_of(layout, p.mask), scale, dq_part,
                              dk_part, dv_part);
      Tensor dq_h = half_of(dq_acc, p.q), dk_h = half_of(dkv[0], p.kv), dv_h = half_of(dkv[1], p.kv);
      ops::add_(dq_h, dq_part);
      ops::add_(dk_h, dk_part);
      ops::add_(dv_h, dv_part);
    }
    // The accumulators follow their K/V to the next rank; after the last step
    // that rank is their owner.
    std::vector<Tensor> dkv_next = empty_like(dkv);
    rotate(cp, dkv, dkv_next)->wait();
    dkv = std::move(dkv_next);
    if (transfer) {
      transfer->wait();
      kv = std::move(next);
    }
  }
  dq.copy_from(dq_acc);
  dk.copy_from(dkv[0]);
  dv.copy_from(dkv[1]);
}

}  // namespace bb
