// The implementations behind cuda::attention_forward/backward: our flash
// attention kernels, and cuDNN's fused attention where the build has it.
//
// attention.cpp checks every argument once and then calls one of these, so
// they take validated tensors (bf16 q/k/v/out, fp32 lse, int32 cu_seqlens on
// the device, head dimension a multiple of 8 up to 128).
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

}  // namespace bb::cuda
