// Dropout mask on CUDA: one thread per element, the CPU op's SplitMix64 draw.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/dropout.h"

namespace bb::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The keep/drop decision compares in double, as the CPU does, so the two
// backends drop exactly the same elements; only the kept value's rounding
// to the mask dtype differs.
template <typename T>
__global__ void dropout_mask_kernel(T* mask, int64_t rows, int64_t cols, uint64_t key, int64_t row_stride,
                                    int64_t col_offset, double p, float keep) {
  const int64_t n = rows * cols;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    const uint64_t counter = uint64_t(i * row_stride + col_offset + j);
    const double u = double(splitmix64(key * 0x632be59bd9b4e019ull + counter) >> 11) * 0x1.0p-53;
    mask[e] = from_float<T>(u < p ? 0.0f : keep);
  }
}

constexpr int kThreads = 256;

}  // namespace

void dropout_mask(Tensor& mask, uint64_t key, int64_t row_stride, int64_t col_offset, double p) {
  check_cuda(mask, "dropout_mask", "mask");
  const int64_t rows = mask.size(0), cols = mask.size(1);
  if (rows * cols == 0) return;
  DeviceGuard guard(mask.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(mask.dtype(), "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    dropout_mask_kernel<T><<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(mask.raw()), rows, cols, key, row_stride, col_offset, p, float(1.0 / (1.0 - p)));
  });
  CUDA_CHECK_LAUNCH("dropout_mask");
}

}  // namespace bb::cuda
