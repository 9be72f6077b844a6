// Our FlashAttention-3-style forward for Hopper (sm_90a): TMA loads driven by
// a producer warp, wgmma for Q K^T and P V, two consumer warpgroups of 64
// query rows each (flash_forward_sm90_kernel.cuh). Compiled only when CMake
// finds the CUTLASS headers (BB_WITH_CUTLASS); flash_forward.cu calls it on
// devices of compute capability 9.0 for the head dims it takes, under
// BB_FLASH_SM90 (default on), and runs its FlashAttention-2 kernel otherwise.
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb::cuda {

// Whether the kernel has tiles for these exact head dims (q/k, v): (64, 64),
// (128, 128) and multi-head latent attention's (192, 128).
bool flash_sm90_forward_takes(int64_t head_dim_qk, int64_t head_dim_v);

// The forward of attention_backends.h's flash_attention_forward, with the
// same arguments and semantics (validated tensors, 16-byte aligned), on the
// current stream.
void flash_sm90_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                        double scale, Tensor& out, Tensor& lse);

}  // namespace bb::cuda
