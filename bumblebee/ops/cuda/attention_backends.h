// The implementations behind cuda::attention_forward/backward: our flash
// attention kernels, cuDNN's fused attention where the build has it, and a
// plain kernel for the shapes those two do not take.
//
// attention.cpp checks every argument once and then calls one of these, so
// they take validated tensors (bf16 q/k/v/out, fp32 lse, int32 cu_seqlens_q
// and cu_seqlens_kv on the device). q and k have the q/k head dim, v, out and
// dout the v head dim, which may differ (multi-head latent attention). Flash
// and cuDNN also need head dims that are multiples of 8 (flash: q/k up to
// kFlashMaxHeadDimQk, v up to kFlashMaxHeadDimV; cuDNN: both up to 128, or
// the pair (192, 128)) and tensors that start on a 16-byte boundary.
//
// Every implementation takes the partial attention of ops.h: query sequence s
// (rows cu_seqlens_q[s].. of q) against key/value sequence s (rows
// cu_seqlens_kv[s].. of k, v), with the causal diagonal aligned bottom-right
// (query i of Lq sees keys j <= i + Lkv - Lq) or no mask. A query row that
// sees no key gets out 0 and lse -inf; backward gives such a row dq 0.
// Plain causal self-attention is the case of one cu_seqlens for both.
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb::cuda {

constexpr int64_t kFlashMaxHeadDimQk = 192, kFlashMaxHeadDimV = 128;
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                             double scale, Tensor& out, Tensor& lse);
void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans, double scale,
                              Tensor& dq, Tensor& dk, Tensor& dv);
// Whether flash_attention_forward (backward) runs these head dims on the
// current device with the sm_90a kernel (cutlass/flash_forward_sm90.h,
// flash_backward_sm90.h) rather than the FlashAttention-2 one.
bool flash_forward_on_sm90(int64_t head_dim_qk, int64_t head_dim_v);
bool flash_backward_on_sm90(int64_t head_dim_qk, int64_t head_dim_v);

// attention_cudnn.cpp. In builds without cudnn-frontend and libcudnn,
// cudnn_attention_built() is false and the other two throw saying so.
bool cudnn_attention_built();
void cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                             double scale, Tensor& out, Tensor& lse);
void cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans, double scale,
                              Tensor& dq, Tensor& dk, Tensor& dv);

// attention_small.cu: one warp per row, fp32 scalar math, for any head
// dims (q/k and v each) from 1 to kSmallAttentionMaxHeadDim and any bf16 alignment.
// attention.cpp sends it whatever flash and cuDNN cannot take (tiny models
// with head dimensions like 6, 10 or 12, or unaligned views). Backward zeroes
// dq, dk, dv of tokens past the last sequence.
constexpr int64_t kSmallAttentionMaxHeadDim = 256;
void small_head_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                                  double scale, Tensor& out, Tensor& lse);
void small_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans,
                                   double scale, Tensor& dq, Tensor& dk, Tensor& dv);

// attention_gqa_expand.cu: grouped-query attention backward by expansion
// (attention.cpp runs it for group ratios Hq / Hkv >= kGqaExpandMinGroup, or
// as BB_ATTENTION_GQA_EXPAND=0|1|auto says). repeat_kv_heads copies kv
// [T, Hkv, D] into expanded [T, Hq, D] (query head h's copy of kv head
// h / (Hq / Hkv)); sum_kv_head_groups sums expanded [T, Hq, D] over each group
// of Hq / Hkv heads into grad [T, Hkv, D] (fp32, fixed order), zero for tokens
// at or past cu_seqlens_kv's last offset. bf16, D a multiple of 8, tensors on
// the 16-byte grid.
constexpr int64_t kGqaExpandMinGroup = 4;
void repeat_kv_heads(const Tensor& kv, Tensor& expanded);
void sum_kv_head_groups(const Tensor& expanded, const Tensor& cu_seqlens_kv, Tensor& grad);

}  // namespace bb::cuda
