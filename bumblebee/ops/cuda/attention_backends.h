// The implementations behind cuda::attention_forward/backward: our flash
// attention kernels, cuDNN's fused attention where the build has it, and a
// plain kernel for the shapes those two do not take.
//
// attention.cpp checks every argument once and then calls one of these, so
// they take validated tensors (bf16 q/k/v/out, fp32 lse, int32 cu_seqlens on
// the device). Flash and cuDNN also need a head dimension that is a multiple
// of 8 up to 128 and tensors that start on a 16-byte boundary.
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"

namespace bb::cuda {

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                             int64_t max_seqlen, double scale, Tensor& out, Tensor& lse);
void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                              double scale, Tensor& dq, Tensor& dk, Tensor& dv);

// attention_cudnn.cpp. In builds without cudnn-frontend and libcudnn,
// cudnn_attention_built() is false and the other two throw saying so.
bool cudnn_attention_built();
void cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                             int64_t max_seqlen, double scale, Tensor& out, Tensor& lse);
void cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                              double scale, Tensor& dq, Tensor& dk, Tensor& dv);

// attention_small.cu: one warp per row, fp32 scalar math, for any head
// dimension from 1 to kSmallAttentionMaxHeadDim and any bf16 alignment.
// attention.cpp sends it whatever flash and cuDNN cannot take (tiny models
// with head dimensions like 6, 10 or 12, or unaligned views). Backward zeroes
// dq, dk, dv of tokens past the last sequence.
constexpr int64_t kSmallAttentionMaxHeadDim = 256;
void small_head_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                                  int64_t max_seqlen, double scale, Tensor& out, Tensor& lse);
void small_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                                   double scale, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace bb::cuda
