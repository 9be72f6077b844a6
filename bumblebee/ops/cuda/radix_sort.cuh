// sort_pairs_by_key: the stable ascending sort of n int32 (key, value) pairs
// whose keys lie in [0, max_key], by CUB's radix sort over only the bits a key
// can set, its scratch from the stream-ordered pool. moe_sort_rows (rows by
// expert) and the deterministic embedding backward (rows by token id) use it.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <cstddef>
#include <cstdint>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda {

inline void sort_pairs_by_key(const Tensor& keys, const Tensor& values, int64_t n, int64_t max_key,
                              Tensor& sorted_keys, Tensor& sorted_values, cudaStream_t stream) {
  int end_bit = 1;
  while (end_bit < 31 && (int64_t(1) << end_bit) <= max_key) ++end_bit;
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.data<int32_t>(), sorted_keys.data<int32_t>(),
                                             values.data<int32_t>(), sorted_values.data<int32_t>(), n, 0, end_bit,
                                             stream));
  Tensor temp = Tensor::empty({int64_t(temp_bytes)}, DType::U8, keys.device());
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, keys.data<int32_t>(), sorted_keys.data<int32_t>(),
                                             values.data<int32_t>(), sorted_values.data<int32_t>(), n, 0, end_bit,
                                             stream));
}

}  // namespace bb::cuda
