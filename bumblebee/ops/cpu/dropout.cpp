// CPU dropout mask: the counter-based keep/drop draw of every element
// (splitmix64 over key and element index; the CUDA kernel draws the same bits,
// so both backends drop the same elements).
#include "bumblebee/core/rng.h"
#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void dropout_mask(Tensor& mask, uint64_t key, int64_t row_stride, int64_t col_offset, double p) {
  const int64_t rows = mask.size(0), cols = mask.size(1);
  const double keep = 1.0 / (1.0 - p);
  visit_float(mask.dtype(), "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    T* m = mask.data<T>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const uint64_t counter = uint64_t(i * row_stride + col_offset + j);
        const double u = double(splitmix64(key * 0x632be59bd9b4e019ull + counter) >> 11) * 0x1.0p-53;
        m[i * cols + j] = T(u < p ? 0.0 : keep);
      }
  });
}

}  // namespace bb::cpu
