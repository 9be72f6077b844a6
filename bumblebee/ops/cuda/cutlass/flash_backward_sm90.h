// Our FlashAttention-3-style backward for Hopper (sm_90a): TMA loads driven
// by a producer warp, wgmma for the five GEMMs, two consumer warpgroups of 64
// keys each (48 at (192, 128); flash_backward_sm90_kernel.cuh). Compiled only
// when CMake finds the CUTLASS headers (BB_WITH_CUTLASS); flash_backward.cu calls it on
// devices of compute capability 9.0 for the head dims it takes, under
// BB_FLASH_SM90 (default on), and runs its FlashAttention-2 kernel otherwise.
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb::cuda {

// Whether the kernel has tiles for these exact head dims (q/k, v): (64, 64),
// (128, 128) and multi-head latent attention's (192, 128).
bool flash_sm90_backward_takes(int64_t head_dim_qk, int64_t head_dim_v);

// attention_backends.h's flash_attention_backward on these kernels: writes
// dq, dk and dv from the same arguments, with the same semantics (validated
// tensors, 16-byte aligned), on the current stream.
void flash_sm90_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                         Tensor& dv);

}  // namespace bb::cuda
