// The CUDA dropout mask (dropout.cu): mask bfloat16 or float32; see ops/dropout.h.
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"

namespace bb::cuda {

void dropout_mask(Tensor& mask, uint64_t key, int64_t row_stride, int64_t col_offset, double p);

}  // namespace bb::cuda
