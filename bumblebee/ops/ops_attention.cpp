// The attention ops of ops.h: the checks of heads, shapes and packed
// sequence offsets, then the backend.
#include "bumblebee/ops/ops.h"

#include <utility>

#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {
namespace {

// Head layout of q [Tq, Hq, Dqk], k [Tkv, Hkv, Dqk], v [Tkv, Hkv, Dv]: the
// v head dim may differ from the q/k one (multi-head latent attention), so
// out and dout are [Tq, Hq, Dv]. Throws on mismatch.
void check_attention_heads(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  expect_dim(op, q, "q", 3);
  expect_dim(op, k, "k", 3);
  expect_dim(op, v, "v", 3);
  const int64_t heads_q = q.size(1), heads_kv = k.size(1), head_dim_qk = q.size(2), head_dim_v = v.size(2);
  BB_CHECK(k.size(2) == head_dim_qk, op, ": k has head dim ", k.size(2), " but q has ", head_dim_qk,
           " (q and k share head_dim_qk)");
  BB_CHECK(v.size(0) == k.size(0) && v.size(1) == heads_kv, op, ": v has shape ", shape_str(v.shape()),
           ", expected [", k.size(0), ", ", heads_kv, ", head_dim_v] (the tokens and heads of k ",
           shape_str(k.shape()), "; head_dim_v may differ from head_dim_qk ", head_dim_qk, ")");
  BB_CHECK(head_dim_qk > 0 && head_dim_v > 0, op, ": head dims must be positive, got head_dim_qk ", head_dim_qk,
           " and head_dim_v ", head_dim_v);
  BB_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, op, ": query heads (", heads_q,
           ") must be a multiple of key/value heads (", heads_kv, ")");
}

// The shape of out / dout: query tokens and heads, the v head dim.
Shape attention_out_shape(const Tensor& q, const Tensor& v) { return {q.size(0), q.size(1), v.size(2)}; }

// Shapes shared by the attention forward and backward; returns nothing, throws on mismatch.
void check_attention_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& cu_seqlens, int64_t max_seqlen) {
  check_attention_heads(op, q, k, v);
  BB_CHECK(k.size(0) == q.size(0), op, ": k has ", k.size(0), " tokens but q has ", q.size(0),
           " (self-attention over one packed batch)");
  expect_dim(op, cu_seqlens, "cu_seqlens", 1);
  BB_CHECK(cu_seqlens.numel() >= 1, op, ": cu_seqlens needs at least one offset (the leading 0)");
  BB_CHECK(cu_seqlens.dtype() == DType::I32, op, ": cu_seqlens must be int32, got ",
           dtype_name(cu_seqlens.dtype()));
  BB_CHECK(max_seqlen >= 0, op, ": max_seqlen is negative (", max_seqlen, ")");
}

// On the host the offsets can be read without a device sync, so a bad
// cu_seqlens is caught here instead of becoming an out-of-bounds read.
void check_cu_seqlens_host(const char* op, const Tensor& cu_seqlens, int64_t tokens, int64_t max_seqlen,
                           const char* rows = "q") {
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t n = cu_seqlens.numel();
  BB_CHECK(cu[0] == 0, op, ": cu_seqlens must start at 0, got ", cu[0]);
  for (int64_t s = 0; s + 1 < n; ++s) {
    const int64_t len = int64_t(cu[s + 1]) - cu[s];
    BB_CHECK(len >= 0, op, ": cu_seqlens decreases at index ", s + 1, " (", cu[s], " -> ", cu[s + 1], ")");
    BB_CHECK(len <= max_seqlen, op, ": sequence ", s, " has ", len, " tokens, more than max_seqlen ", max_seqlen);
  }
  BB_CHECK(cu[n - 1] == tokens, op, ": cu_seqlens ends at ", cu[n - 1], " but ", rows, " has ", tokens, " tokens");
}

// out and dout [Tq, Hq, Dv], lse [Tq, Hq] and the gradients shaped as q, k, v.
void check_backward_shapes(const char* op, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  expect_shape(op, dout, "dout", attention_out_shape(q, v));
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  expect_shape(op, dq, "dq", q.shape());
  expect_shape(op, dk, "dk", k.shape());
  expect_shape(op, dv, "dv", v.shape());
}

// The spans of plain causal self-attention: every sequence against itself.
AttentionSpans self_spans(const Tensor& cu_seqlens, int64_t max_seqlen) {
  return {cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, AttentionMask::Causal};
}

void check_spans(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpans& spans) {
  check_attention_heads(op, q, k, v);
  for (auto [cu, name] : {std::pair{&spans.cu_seqlens_q, "cu_seqlens_q"}, {&spans.cu_seqlens_kv, "cu_seqlens_kv"}}) {
    expect_dim(op, *cu, name, 1);
    BB_CHECK(cu->numel() >= 1, op, ": ", name, " needs at least one offset (the leading 0)");
    BB_CHECK(cu->dtype() == DType::I32, op, ": ", name, " must be int32, got ", dtype_name(cu->dtype()));
  }
  BB_CHECK(spans.cu_seqlens_q.numel() == spans.cu_seqlens_kv.numel(), op, ": cu_seqlens_q has ",
           spans.cu_seqlens_q.numel() - 1, " sequences but cu_seqlens_kv ", spans.cu_seqlens_kv.numel() - 1);
  BB_CHECK(spans.max_seqlen_q >= 0 && spans.max_seqlen_kv >= 0, op, ": max_seqlen_q ", spans.max_seqlen_q,
           " or max_seqlen_kv ", spans.max_seqlen_kv, " is negative");
}

}  // namespace

const char* attention_mask_name(AttentionMask mask) { return mask == AttentionMask::Causal ? "causal" : "none"; }

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                       int64_t max_seqlen, double scale, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Device dev = common_device(
      op, {{q, "q"}, {k, "k"}, {v, "v"}, {cu_seqlens, "cu_seqlens"}, {out, "out"}, {lse, "lse"}});
  check_attention_shapes(op, q, k, v, cu_seqlens, max_seqlen);
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"}});
    check_cu_seqlens_host(op, cu_seqlens, q.size(0), max_seqlen);
    BB_DISPATCH_CPU(attention_forward, q, k, v, self_spans(cu_seqlens, max_seqlen), scale, out, lse);
  }
  BB_DISPATCH_CUDA(attention_forward, q, k, v, cu_seqlens, max_seqlen, scale, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, double scale, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                                        {cu_seqlens, "cu_seqlens"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
  check_attention_shapes(op, q, k, v, cu_seqlens, max_seqlen);
  check_backward_shapes(op, dout, q, k, v, out, lse, dq, dk, dv);
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {dout, "dout"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                               {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
    check_cu_seqlens_host(op, cu_seqlens, q.size(0), max_seqlen);
    BB_DISPATCH_CPU(attention_backward, dout, q, k, v, out, lse, self_spans(cu_seqlens, max_seqlen), scale, dq, dk,
                    dv);
  }
  BB_DISPATCH_CUDA(attention_backward, dout, q, k, v, out, lse, cu_seqlens, max_seqlen, scale, dq, dk, dv);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpans& spans, double scale,
                       Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Device dev = common_device(op, {{q, "q"}, {k, "k"}, {v, "v"}, {spans.cu_seqlens_q, "cu_seqlens_q"},
                                        {spans.cu_seqlens_kv, "cu_seqlens_kv"}, {out, "out"}, {lse, "lse"}});
  check_spans(op, q, k, v, spans);
  expect_shape(op, out, "out", attention_out_shape(q, v));
  expect_shape(op, lse, "lse", {q.size(0), q.size(1)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"}});
    check_cu_seqlens_host(op, spans.cu_seqlens_q, q.size(0), spans.max_seqlen_q);
    check_cu_seqlens_host(op, spans.cu_seqlens_kv, k.size(0), spans.max_seqlen_kv, "k");
    BB_DISPATCH_CPU(attention_forward, q, k, v, spans, scale, out, lse);
  }
  BB_DISPATCH_CUDA(attention_forward, q, k, v, spans, scale, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const char* op = "attention_backward";
  const Device dev = common_device(op, {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                                        {spans.cu_seqlens_q, "cu_seqlens_q"}, {spans.cu_seqlens_kv, "cu_seqlens_kv"},
                                        {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
  check_spans(op, q, k, v, spans);
  check_backward_shapes(op, dout, q, k, v, out, lse, dq, dk, dv);
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{q, "q"}, {dout, "dout"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                               {dq, "dq"}, {dk, "dk"}, {dv, "dv"}});
    check_cu_seqlens_host(op, spans.cu_seqlens_q, q.size(0), spans.max_seqlen_q);
    check_cu_seqlens_host(op, spans.cu_seqlens_kv, k.size(0), spans.max_seqlen_kv, "k");
    BB_DISPATCH_CPU(attention_backward, dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
  }
  BB_DISPATCH_CUDA(attention_backward, dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const char* op = "attention_merge";
  const Device dev =
      common_device(op, {{out, "out"}, {lse, "lse"}, {part_out, "part_out"}, {part_lse, "part_lse"}});
  expect_dim(op, out, "out", 3);
  expect_shape(op, part_out, "part_out", out.shape());
  expect_shape(op, lse, "lse", {out.size(0), out.size(1)});
  expect_shape(op, part_lse, "part_lse", lse.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{out, "out"}, {lse, "lse"}, {part_out, "part_out"}, {part_lse, "part_lse"}});
    BB_DISPATCH_CPU(attention_merge, out, lse, part_out, part_lse);
  }
  BB_DISPATCH_CUDA(attention_merge, out, lse, part_out, part_lse);
}

}  // namespace bb::ops
