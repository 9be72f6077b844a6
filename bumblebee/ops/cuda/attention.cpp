// cuda::attention_forward / attention_backward: argument checks and the
// choice of implementation. Every implementation takes the partial attention
// of ring attention (separate q / kv spans, causal bottom-right or no mask);
// plain causal self-attention is its case of one cu_seqlens for both.
//
// backend.attention_backend (ops/attention_backend.h), or the environment
// variable BB_ATTENTION_BACKEND over it, picks cudnn (cuDNN's fused attention
// through cudnn-frontend; auto's choice in builds that found it: 527/435
// TFLOP/s forward/backward on an H200 against 198/121 for our kernel,
// benchmarks/RESULTS.md) or flash (our FlashAttention-2 kernels; auto's choice
// when the build has no cuDNN). The variable is read at every call, so one
// process can compare both.
//
// Both read 16-byte vectors, so they take head dimensions that are multiples
// of 8 up to 128 and tensors that start on a 16-byte boundary. Any other
// shape (head dimensions 1 to 256, any bf16 alignment) goes to the plain
// kernel of attention_small.cu, whichever backend the variable names: a
// forced flash or cudnn applies only to the shapes it can take.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "bumblebee/ops/attention_backend.h"
#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

using ops::AttentionBackend;

// The backend of one call: BB_ATTENTION_BACKEND when set, else the runtime's
// backend.attention_backend (ops::set_attention_backend); auto picks cuDNN when built.
AttentionBackend selected_backend() {
  const char* env = std::getenv("BB_ATTENTION_BACKEND");
  const AttentionBackend chosen = env && *env ? ops::attention_backend_from_name(env) : ops::attention_backend();
  if (chosen != AttentionBackend::Auto) return chosen;
  return cudnn_attention_built() ? AttentionBackend::Cudnn : AttentionBackend::Flash;
}

bool aligned16(const Tensor& t) { return (reinterpret_cast<uintptr_t>(t.raw()) & 15u) == 0; }

// Whether flash and cuDNN can take this head dimension and these tensors.
bool tiled_kernels_take(int64_t head_dim, std::initializer_list<const Tensor*> tensors) {
  if (head_dim % 8 != 0 || head_dim > 128) return false;
  for (const Tensor* t : tensors)
    if (!aligned16(*t)) return false;
  return true;
}

void check_activation(const Tensor& ref, const Tensor& t, const char* op, const char* name, const Shape& shape) {
  BB_CHECK(t.defined(), op, ": tensor ", name, " is undefined");
  BB_CHECK(t.device() == ref.device(), op, ": tensor ", name, " is on ", t.device().str(), " but q is on ",
           ref.device().str());
  BB_CHECK(t.dtype() == DType::BF16, op, ": tensor ", name, " must be bfloat16 on CUDA, got ", dtype_name(t.dtype()));
  BB_CHECK(t.shape() == shape, op, ": tensor ", name, " must be ", shape_str(shape), ", got ", shape_str(t.shape()));
}

void check_offsets(const char* op, const Tensor& q, const Tensor& cu, const char* name) {
  BB_CHECK(cu.defined() && cu.device() == q.device(), op, ": ", name, " must be on ", q.device().str());
  BB_CHECK(cu.dtype() == DType::I32, op, ": ", name, " must be int32, got ", dtype_name(cu.dtype()));
  BB_CHECK(cu.dim() == 1 && cu.numel() >= 2, op, ": ", name, " must be [S + 1] with S >= 1, got ",
           shape_str(cu.shape()));
  BB_CHECK(cu.numel() - 1 <= 65535, op, ": ", cu.numel() - 1, " sequences exceed the CUDA grid limit of 65535");
}

// Checks shared by forward and backward; returns false when there is no work.
bool check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                     const ops::AttentionSpans& spans, const Tensor& lse) {
  BB_CHECK(q.defined() && q.device().is_cuda(), op, ": q must be a CUDA tensor, got ",
           q.defined() ? q.device().str() : std::string("an undefined tensor"));
  BB_CHECK(q.dim() == 3, op, ": q must be [Tq, Hq, D], got ", shape_str(q.shape()));
  BB_CHECK(k.dim() == 3, op, ": k must be [Tkv, Hkv, D], got ", shape_str(k.shape()));
  const int64_t tokens_q = q.size(0), tokens_kv = k.size(0), heads_q = q.size(1), head_dim = q.size(2),
                heads_kv = k.size(1);
  check_activation(q, q, op, "q", {tokens_q, heads_q, head_dim});
  check_activation(q, k, op, "k", {tokens_kv, heads_kv, head_dim});
  check_activation(q, v, op, "v", {tokens_kv, heads_kv, head_dim});
  BB_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, op, ": ", heads_q, " query heads are not a multiple of ",
           heads_kv, " kv heads");
  BB_CHECK(head_dim >= 1 && head_dim <= kSmallAttentionMaxHeadDim, op,
           ": the CUDA attention supports head dimensions from 1 to ", kSmallAttentionMaxHeadDim, ", got ", head_dim);
  BB_CHECK(heads_q <= 65535, op, ": ", heads_q, " query heads exceed the CUDA grid limit of 65535");
  check_offsets(op, q, spans.cu_seqlens_q, "cu_seqlens_q");
  check_offsets(op, q, spans.cu_seqlens_kv, "cu_seqlens_kv");
  BB_CHECK(spans.cu_seqlens_q.numel() == spans.cu_seqlens_kv.numel(), op, ": cu_seqlens_q has ",
           spans.cu_seqlens_q.numel() - 1, " sequences but cu_seqlens_kv ", spans.cu_seqlens_kv.numel() - 1);
  BB_CHECK(tokens_q <= INT32_MAX && tokens_kv <= INT32_MAX, op, ": ", std::max(tokens_q, tokens_kv),
           " tokens exceed int32 offsets");
  BB_CHECK(lse.defined() && lse.device() == q.device() && lse.dtype() == DType::F32, op,
           ": lse must be a float32 tensor on ", q.device().str());
  check_shape(lse, {tokens_q, heads_q}, "attention: lse");
  if (tokens_q == 0) return false;
  BB_CHECK(spans.max_seqlen_q >= 1 && spans.max_seqlen_q <= tokens_q, op, ": max_seqlen_q ", spans.max_seqlen_q,
           " is outside [1, ", tokens_q, "]");
  BB_CHECK(spans.max_seqlen_kv >= 0 && spans.max_seqlen_kv <= tokens_kv, op, ": max_seqlen_kv ",
           spans.max_seqlen_kv, " is outside [0, ", tokens_kv, "]");
  return true;
}

// The spans of plain causal self-attention: every sequence against itself.
ops::AttentionSpans self_spans(const Tensor& cu_seqlens, int64_t max_seqlen) {
  return {cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, ops::AttentionMask::Causal};
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                       double scale, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  if (!check_attention(op, q, k, v, spans, lse)) return;
  check_activation(q, out, op, "out", q.shape());
  DeviceGuard guard(q.device().index);
  const AttentionBackend backend = selected_backend();
  if (!tiled_kernels_take(q.size(2), {&q, &k, &v, &out}))
    small_head_attention_forward(q, k, v, spans, scale, out, lse);
  else if (backend == AttentionBackend::Cudnn)
    cudnn_attention_forward(q, k, v, spans, scale, out, lse);
  else
    flash_attention_forward(q, k, v, spans, scale, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const char* op = "attention_backward";
  if (!check_attention(op, q, k, v, spans, lse)) return;
  check_activation(q, dout, op, "dout", q.shape());
  check_activation(q, out, op, "out", q.shape());
  check_activation(q, dq, op, "dq", q.shape());
  check_activation(q, dk, op, "dk", k.shape());
  check_activation(q, dv, op, "dv", v.shape());
  DeviceGuard guard(q.device().index);
  const AttentionBackend backend = selected_backend();
  if (!tiled_kernels_take(q.size(2), {&dout, &q, &k, &v, &out, &dq, &dk, &dv}))
    small_head_attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
  else if (backend == AttentionBackend::Cudnn)
    cudnn_attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
  else
    flash_attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                       int64_t max_seqlen, double scale, Tensor& out, Tensor& lse) {
  // Qualified: ops::attention_forward would be an equal candidate by argument-dependent lookup.
  cuda::attention_forward(q, k, v, self_spans(cu_seqlens, max_seqlen), scale, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen, double scale, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  cuda::attention_backward(dout, q, k, v, out, lse, self_spans(cu_seqlens, max_seqlen), scale, dq, dk, dv);
}

}  // namespace bb::cuda
