// CPU grouped-query attention over packed variable-length sequences, with
// separate query and key/value sequence ranges and a causal or full mask
// (the partial attention of ring attention), and the log-sum-exp merge.
//
// The plain algorithm, one (sequence, query head) at a time: scores, stable
// softmax, weighted sum of values. The backward recomputes the probabilities
// from the saved log-sum-exp as flash attention does,
//   P = exp(S - lse),  dV = P^T dO,  dP = dO V^T,  D_i = rowsum(dO * O),
//   dS = P * (dP - D_i),  dQ = scale dS K,  dK = scale dS^T Q,
// so it checks the same identities the CUDA kernel relies on. Every dot
// product and sum accumulates in double, which makes float64 exact to
// rounding. Serial: the CPU backend is the oracle, not the fast path.
//
// Scores use the q/k head dim, values and outputs the v head dim; the two
// differ in multi-head latent attention (DeepSeek-V3: q/k 192 = nope + rope,
// v 128).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {
namespace {

// Row offsets of query head h / its kv head at token t: q and k rows hold
// head_dim_qk values, v, out and dout rows head_dim_v.
struct Layout {
  int64_t heads_q, heads_kv, head_dim_qk, head_dim_v, group;
  int64_t q_row(int64_t t, int64_t h) const { return (t * heads_q + h) * head_dim_qk; }
  int64_t k_row(int64_t t, int64_t h) const { return (t * heads_kv + h / group) * head_dim_qk; }
  int64_t o_row(int64_t t, int64_t h) const { return (t * heads_q + h) * head_dim_v; }
  int64_t v_row(int64_t t, int64_t h) const { return (t * heads_kv + h / group) * head_dim_v; }
};

Layout layout_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  Layout l{q.size(1), k.size(1), q.size(2), v.size(2), 0};
  l.group = l.heads_q / l.heads_kv;
  return l;
}

template <typename T>
double dot(const T* a, const T* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Sequence s's rows in q and in k/v, and the keys [kv_begin, key_end(i)) query i sees.
struct SequenceSpan {
  int64_t q_begin, q_end, kv_begin, kv_end;
  bool causal;
  int64_t key_end(int64_t i) const {
    if (!causal) return kv_end;
    const int64_t last = i - q_begin + (kv_end - kv_begin) - (q_end - q_begin);   // bottom-right diagonal
    return std::clamp<int64_t>(kv_begin + last + 1, kv_begin, kv_end);
  }
};

std::vector<SequenceSpan> spans_of(const ops::AttentionSpans& spans, const char* op) {
  const std::vector<int64_t> cq = read_indices(spans.cu_seqlens_q, op);
  const std::vector<int64_t> ckv = read_indices(spans.cu_seqlens_kv, op);
  std::vector<SequenceSpan> out;
  for (size_t s = 0; s + 1 < cq.size(); ++s)
    out.push_back({cq[s], cq[s + 1], ckv[s], ckv[s + 1], spans.mask == ops::AttentionMask::Causal});
  return out;
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                       double scale, Tensor& out, Tensor& lse) {
  const Layout l = layout_of(q, k, v);
  const std::vector<SequenceSpan> seqs = spans_of(spans, "attention_forward");
  visit_float(q.dtype(), "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    // Sized by the sequences themselves, not by max_seqlen (a CUDA grid hint).
    int64_t longest = 0;
    for (const SequenceSpan& sp : seqs) longest = std::max(longest, sp.kv_end - sp.kv_begin);
    std::vector<double> scores(static_cast<size_t>(longest)), acc(static_cast<size_t>(l.head_dim_v));
    for (const SequenceSpan& sp : seqs) {
      for (int64_t h = 0; h < l.heads_q; ++h) {
        for (int64_t i = sp.q_begin; i < sp.q_end; ++i) {
          const T* qi = pq + l.q_row(i, h);
          const int64_t end = sp.key_end(i);
          double row_max = -std::numeric_limits<double>::infinity();
          for (int64_t j = sp.kv_begin; j < end; ++j) {
            double& sc = scores[size_t(j - sp.kv_begin)];
            sc = scale * dot(qi, pk + l.k_row(j, h), l.head_dim_qk);
            row_max = std::max(row_max, sc);
          }
          std::fill(acc.begin(), acc.end(), 0.0);
          double row_lse = -std::numeric_limits<double>::infinity();
          if (end > sp.kv_begin) {
            double denom = 0.0;
            for (int64_t j = sp.kv_begin; j < end; ++j) denom += std::exp(scores[size_t(j - sp.kv_begin)] - row_max);
            row_lse = row_max + std::log(denom);
            for (int64_t j = sp.kv_begin; j < end; ++j) {
              const double p = std::exp(scores[size_t(j - sp.kv_begin)] - row_lse);
              const T* vj = pv + l.v_row(j, h);
              for (int64_t d = 0; d < l.head_dim_v; ++d) acc[size_t(d)] += p * double(vj[d]);
            }
          }
          T* oi = po + l.o_row(i, h);
          for (int64_t d = 0; d < l.head_dim_v; ++d) oi[d] = T(acc[size_t(d)]);
          pl[i * l.heads_q + h] = T(row_lse);
        }
      }
    }
  });
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const Layout l = layout_of(q, k, v);
  const std::vector<SequenceSpan> seqs = spans_of(spans, "attention_backward");
  visit_float(q.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdo = dout.data<T>();
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    const T* po = out.data<T>();
    const T* pl = lse.data<T>();
    T* pdq = dq.data<T>();
    // dK and dV gather contributions from every query head of their group.
    std::vector<double> dk_acc(size_t(k.numel()), 0.0), dv_acc(size_t(v.numel()), 0.0);
    std::vector<double> dq_acc(size_t(l.head_dim_qk));
    std::fill(pdq, pdq + q.numel(), T(0));   // rows outside every sequence get no gradient
    for (const SequenceSpan& sp : seqs) {
      for (int64_t h = 0; h < l.heads_q; ++h) {
        for (int64_t i = sp.q_begin; i < sp.q_end; ++i) {
          const T* qi = pq + l.q_row(i, h);
          const T* doi = pdo + l.o_row(i, h);
          const double row_lse = double(pl[i * l.heads_q + h]);
          const double d_i = dot(doi, po + l.o_row(i, h), l.head_dim_v);
          std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
          const int64_t end = row_lse == -std::numeric_limits<double>::infinity() ? sp.kv_begin : sp.key_end(i);
          for (int64_t j = sp.kv_begin; j < end; ++j) {
            const T* kj = pk + l.k_row(j, h);
            const T* vj = pv + l.v_row(j, h);
            const double p = std::exp(scale * dot(qi, kj, l.head_dim_qk) - row_lse);
            const double ds = p * (dot(doi, vj, l.head_dim_v) - d_i);
            double* dkj = dk_acc.data() + l.k_row(j, h);
            double* dvj = dv_acc.data() + l.v_row(j, h);
            for (int64_t d = 0; d < l.head_dim_v; ++d) dvj[d] += p * double(doi[d]);
            for (int64_t d = 0; d < l.head_dim_qk; ++d) {
              dkj[d] += scale * ds * double(qi[d]);
              dq_acc[size_t(d)] += scale * ds * double(kj[d]);
            }
          }
          T* dqi = pdq + l.q_row(i, h);
          for (int64_t d = 0; d < l.head_dim_qk; ++d) dqi[d] = T(dq_acc[size_t(d)]);
        }
      }
    }
    T* pdk = dk.data<T>();
    T* pdv = dv.data<T>();
    for (size_t i = 0; i < dk_acc.size(); ++i) pdk[i] = T(dk_acc[i]);
    for (size_t i = 0; i < dv_acc.size(); ++i) pdv[i] = T(dv_acc[i]);
  });
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const int64_t rows = lse.numel(), head_dim = out.size(2);
  visit_float(out.dtype(), "attention_merge", [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    const T* ppo = part_out.data<T>();
    const T* ppl = part_lse.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const double a = double(pl[r]), b = double(ppl[r]);
      const double m = std::max(a, b);
      if (m == -std::numeric_limits<double>::infinity()) continue;
      const double merged = m + std::log(std::exp(a - m) + std::exp(b - m));
      const double wa = std::exp(a - merged), wb = std::exp(b - merged);
      for (int64_t d = 0; d < head_dim; ++d)
        po[r * head_dim + d] = T(wa * double(po[r * head_dim + d]) + wb * double(ppo[r * head_dim + d]));
      pl[r] = T(merged);
    }
  });
}

}  // namespace bb::cpu
