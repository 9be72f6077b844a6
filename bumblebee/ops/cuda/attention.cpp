// cuda::attention_forward / attention_backward: argument checks and the
// choice of implementation. Every implementation takes the partial attention
// of ring attention (separate q / kv spans, causal bottom-right or no mask);
// plain causal self-attention is its case of one cu_seqlens for both.
//
// The backward of grouped-query attention on our FlashAttention-2 kernel, from
// a group ratio Hq / Hkv of kGqaExpandMinGroup (4) on, runs as multi-head
// attention on K/V repeated to Hq heads, dK/dV then summed over each group
// (attention_gqa_expand.cu): that kernel walks a group's query heads in one
// block, and at 8:1 (Qwen3-30B-A3B, 32 / 4 heads, 2 x 4096 tokens) the
// expansion took it from 8.30 to 6.10 ms on an H200. The sm_90a backward
// walks the group faster than the expanded heads (1.62 against 1.72 ms there),
// and cuDNN's runs at the same rate either way (1.48 / 1.55 ms), so auto
// leaves both alone. The
// environment variable BB_ATTENTION_GQA_EXPAND=0|1|auto (read at every call)
// turns it off, on for every grouped shape on both tiled backends, or leaves
// the rule; the small kernel keeps its own group walk. The four [Tkv, Hq, D]
// scratch tensors are freed when the call returns.
//
// backend.attention_backend (ops/attention_backend.h), or the environment
// variable BB_ATTENTION_BACKEND over it, picks cudnn (cuDNN's fused attention
// through cudnn-frontend), flash (our own kernels) or auto, which decides per
// call (ops::auto_attention_backend): on an H200 our sm_90a kernels lead
// cuDNN's in every forward (hd 128 at 16 / 8 heads 555-589 against 522-569
// TFLOP/s, hd 64 417 against 412, 192 / 128 590-648 against 479-599) and in
// the backward at hd 64 and 128 (hd 128 1-4 sequences of 4096 at 16 / 8
// heads 473-479 against 370-462, 8:1 475 against 466, hd 64 366 against
// 340), and trail its backward at 192 / 128 (332-404 against 346-428), so
// auto takes ours for those and cuDNN's for the (192, 128) backward; in the
// dense benches ours train 0.2-1.1 % faster end to end (benchmarks/RESULTS.md,
// eighteenth session). Without our sm_90a kernels (another GPU,
// BB_FLASH_SM90=0) auto takes cuDNN, and a build without cuDNN takes flash.
// The variable is read at every call, so one process can compare both. Flash
// itself has two kernels a direction: on compute capability 9.0 in builds
// with CUTLASS, the FlashAttention-3-style sm_90a kernels run the forward of
// head dims (64, 64), (128, 128) and (192, 128) (cutlass/flash_forward_sm90.h)
// and the backward of the same pairs (cutlass/flash_backward_sm90.h),
// unless BB_FLASH_SM90=0 (read at every call by flash_forward.cu /
// flash_backward.cu) keeps the FlashAttention-2 ones.
//
// The v head dim may differ from the q/k one (multi-head latent attention,
// DeepSeek-V3: 192 / 128). Both tiled backends read 16-byte vectors, so they
// take head dims that are multiples of 8 and tensors that start on a 16-byte
// boundary; cuDNN takes q/k and v head dims up to 128 and the pair (192, 128),
// flash q/k head dims up to 192 with v head dims up to 128 (its tiles are
// (64, 64), (128, 128) and (192, 128), zero-padded). A shape the chosen
// backend cannot take goes to flash when flash can, else to the plain kernel
// of attention_small.cu (head dims 1 to 256, any bf16 alignment): a forced
// backend applies only to the shapes it can take. docs/cuda.md lists the pairs.
//
// Under deterministic mode (backend.deterministic) a backward that would run
// on flash is an error: its dQ sums the key blocks' contributions with
// atomics. cuDNN's backward then takes its deterministic algorithm
// (attention_cudnn.cpp); the small kernel has no atomics.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "bumblebee/ops/attention_backend.h"
#include "bumblebee/ops/deterministic.h"
#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

using ops::AttentionBackend;

enum class Direction { Forward, Backward };

// The backend of one call in `direction`: BB_ATTENTION_BACKEND when set, else
// the runtime's backend.attention_backend (ops::set_attention_backend), auto
// resolved for this call's head dims.
AttentionBackend selected_backend(Direction direction, int64_t head_dim_qk, int64_t head_dim_v) {
  const char* env = std::getenv("BB_ATTENTION_BACKEND");
  const AttentionBackend chosen = env && *env ? ops::attention_backend_from_name(env) : ops::attention_backend();
  if (chosen != AttentionBackend::Auto) return chosen;
  ops::AttentionCall call;
  call.backward = direction == Direction::Backward;
  call.head_dim_qk = head_dim_qk;
  call.head_dim_v = head_dim_v;
  call.hopper_kernel = call.backward ? flash_backward_on_sm90(head_dim_qk, head_dim_v)
                                     : flash_forward_on_sm90(head_dim_qk, head_dim_v);
  call.deterministic = ops::deterministic();
  call.cudnn_built = cudnn_attention_built();
  return ops::auto_attention_backend(call);
}

bool aligned16(const Tensor& t) { return (reinterpret_cast<uintptr_t>(t.raw()) & 15u) == 0; }

bool cudnn_takes(int64_t head_dim_qk, int64_t head_dim_v) {
  return head_dim_qk % 8 == 0 && head_dim_v % 8 == 0 &&
         ((head_dim_qk <= 128 && head_dim_v <= 128) || (head_dim_qk == 192 && head_dim_v == 128));
}

bool flash_takes(int64_t head_dim_qk, int64_t head_dim_v) {
  return head_dim_qk % 8 == 0 && head_dim_v % 8 == 0 && head_dim_qk <= kFlashMaxHeadDimQk &&
         head_dim_v <= kFlashMaxHeadDimV;
}

enum class Implementation { Cudnn, Flash, Small };

// The implementation of one call in `direction` for q [.., Dqk] and v [.., Dv]
// and its tensors.
Implementation implementation_for(Direction direction, const Tensor& q, const Tensor& v,
                                  std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (!aligned16(*t)) return Implementation::Small;
  const int64_t dqk = q.size(2), dv = v.size(2);
  if (selected_backend(direction, dqk, dv) == AttentionBackend::Cudnn && cudnn_takes(dqk, dv))
    return Implementation::Cudnn;
  if (flash_takes(dqk, dv)) return Implementation::Flash;
  return Implementation::Small;
}

// Whether this backward runs by expansion: BB_ATTENTION_GQA_EXPAND=1 for every
// grouped-query shape, 0 never, auto (or unset) on flash's FlashAttention-2
// kernel from kGqaExpandMinGroup on.
bool gqa_expand_selected(Implementation impl, const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t heads_q = q.size(1), heads_kv = k.size(1);
  if (heads_q == heads_kv) return false;
  const char* env = std::getenv("BB_ATTENTION_GQA_EXPAND");
  const std::string mode = env ? env : "";
  BB_CHECK(mode.empty() || mode == "auto" || mode == "0" || mode == "1", "BB_ATTENTION_GQA_EXPAND is '", mode,
           "'; it must be 0, 1 or auto");
  if (mode == "0") return false;
  if (mode == "1") return true;
  return impl == Implementation::Flash && heads_q / heads_kv >= kGqaExpandMinGroup &&
         !flash_backward_on_sm90(q.size(2), v.size(2));
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
  BB_CHECK(q.dim() == 3, op, ": q must be [Tq, Hq, Dqk], got ", shape_str(q.shape()));
  BB_CHECK(k.dim() == 3, op, ": k must be [Tkv, Hkv, Dqk], got ", shape_str(k.shape()));
  BB_CHECK(v.defined() && v.dim() == 3, op, ": v must be [Tkv, Hkv, Dv], got ",
           v.defined() ? shape_str(v.shape()) : std::string("an undefined tensor"));
  const int64_t tokens_q = q.size(0), tokens_kv = k.size(0), heads_q = q.size(1), head_dim_qk = q.size(2),
                heads_kv = k.size(1), head_dim_v = v.size(2);
  check_activation(q, q, op, "q", {tokens_q, heads_q, head_dim_qk});
  check_activation(q, k, op, "k", {tokens_kv, heads_kv, head_dim_qk});
  check_activation(q, v, op, "v", {tokens_kv, heads_kv, head_dim_v});
  BB_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, op, ": ", heads_q, " query heads are not a multiple of ",
           heads_kv, " kv heads");
  for (auto [dim, name] : {std::pair{head_dim_qk, "q/k"}, {head_dim_v, "v"}})
    BB_CHECK(dim >= 1 && dim <= kSmallAttentionMaxHeadDim, op, ": the CUDA attention supports head dims from 1 to ",
             kSmallAttentionMaxHeadDim, ", got ", dim, " for ", name, " (q/k ", head_dim_qk, ", v ", head_dim_v, ")");
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

void run_backward(Implementation impl, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq,
                  Tensor& dk, Tensor& dv) {
  switch (impl) {
    case Implementation::Cudnn: cudnn_attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv); break;
    case Implementation::Flash: flash_attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv); break;
    case Implementation::Small:
      small_head_attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
      break;
  }
}

// The backward as multi-head attention on K/V repeated to Hq heads; dK and dV
// are the sums of the per-query-head gradients over each group.
void expanded_backward(Implementation impl, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans, double scale,
                       Tensor& dq, Tensor& dk, Tensor& dv) {
  const Shape k_full_shape{k.size(0), q.size(1), k.size(2)}, v_full_shape{v.size(0), q.size(1), v.size(2)};
  Tensor k_full = Tensor::empty(k_full_shape, DType::BF16, q.device());
  Tensor v_full = Tensor::empty(v_full_shape, DType::BF16, q.device());
  repeat_kv_heads(k, k_full);
  repeat_kv_heads(v, v_full);
  Tensor dk_full = Tensor::empty(k_full_shape, DType::BF16, q.device());
  Tensor dv_full = Tensor::empty(v_full_shape, DType::BF16, q.device());
  run_backward(impl, dout, q, k_full, v_full, out, lse, spans, scale, dq, dk_full, dv_full);
  sum_kv_head_groups(dk_full, spans.cu_seqlens_kv, dk);
  sum_kv_head_groups(dv_full, spans.cu_seqlens_kv, dv);
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
  const Shape out_shape{q.size(0), q.size(1), v.size(2)};
  check_activation(q, out, op, "out", out_shape);
  DeviceGuard guard(q.device().index);
  switch (implementation_for(Direction::Forward, q, v, {&q, &k, &v, &out})) {
    case Implementation::Cudnn: cudnn_attention_forward(q, k, v, spans, scale, out, lse); break;
    case Implementation::Flash: flash_attention_forward(q, k, v, spans, scale, out, lse); break;
    case Implementation::Small: small_head_attention_forward(q, k, v, spans, scale, out, lse); break;
  }
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const char* op = "attention_backward";
  if (!check_attention(op, q, k, v, spans, lse)) return;
  const Shape out_shape{q.size(0), q.size(1), v.size(2)};
  check_activation(q, dout, op, "dout", out_shape);
  check_activation(q, out, op, "out", out_shape);
  check_activation(q, dq, op, "dq", q.shape());
  check_activation(q, dk, op, "dk", k.shape());
  check_activation(q, dv, op, "dv", v.shape());
  DeviceGuard guard(q.device().index);
  const Implementation impl = implementation_for(Direction::Backward, q, v, {&dout, &q, &k, &v, &out, &dq, &dk, &dv});
  BB_CHECK(!(impl == Implementation::Flash && ops::deterministic()), op,
           ": backend.deterministic=true, but this backward (q/k head dim ", q.size(2), ", v ", v.size(2),
           ") would run on the flash kernel, whose dQ sums with atomics; use backend.attention_backend=cudnn "
           "(or auto in a build with cuDNN; cuDNN takes head dims up to 128 and the pair 192 / 128), or "
           "backend.deterministic=false");
  if (impl != Implementation::Small && gqa_expand_selected(impl, q, k, v))
    expanded_backward(impl, dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
  else
    run_backward(impl, dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
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
