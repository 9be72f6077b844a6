// Element conversions and grid sizing for device code, shared by the CUDA
// memory pool's cast (core/cuda) and every kernel of the CUDA backend (ops/cuda).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "bumblebee/core/cuda/cuda_context.h"

namespace bb::cuda {

using bf16 = __nv_bfloat16;

// ---- element conversions (all arithmetic is fp32 or wider) -------------------
template <typename T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else return float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, bf16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return T(x);
}

// ---- launch sizing ----------------------------------------------------------------------
// Blocks for a grid-stride loop over `work` items of `threads` each: enough to
// fill every multiprocessor a few times over, never more than the work needs.
inline int grid_for(int64_t work, int threads) {
  int64_t needed = (work + threads - 1) / threads;
  int64_t cap = int64_t(device_properties().multiProcessorCount) * 8;
  if (needed < 1) needed = 1;
  return int(needed < cap ? needed : cap);
}

}  // namespace bb::cuda
