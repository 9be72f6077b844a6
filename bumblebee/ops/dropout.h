// The dropout op (LoRA's adapter dropout, primitive/modules/lora_dropout.h),
// beside the op surface of ops.h and dispatched as its ops are.
//
// Inverted dropout's mask: mask [R, C] (floating) gets 1 / (1 - p) where an
// element is kept and 0 where it is dropped (probability p, 0 <= p < 1).
// Element (i, j) draws u from SplitMix64 at counter i * row_stride +
// col_offset + j of `key` and is dropped when u < p, so a column slice of a
// wider tensor (a tensor-parallel shard) gets the slice of the full mask, and
// CPU and CUDA drop the same elements (the decision is made in double on both).
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"

namespace bb::ops {

void dropout_mask(Tensor& mask, uint64_t key, int64_t row_stride, int64_t col_offset, double p);

}  // namespace bb::ops
