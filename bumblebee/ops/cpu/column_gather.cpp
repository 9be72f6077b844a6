// CPU column gather and its adjoint, the scatter-add of columns.
#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void gather_columns(const Tensor& x, const ops::ColumnIndex& index, Tensor& y) {
  const int64_t rows = x.size(0), in = x.size(1), out = index.out();
  const int64_t* idx = index.index.data<int64_t>();
  visit_float(x.dtype(), "gather_columns", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) py[r * out + j] = px[r * in + idx[j]];
  });
}

// Sums in ascending output column per input column, the order of the CUDA
// kernel, into dx's own value or zero.
void scatter_add_columns(const Tensor& dy, const ops::ColumnIndex& index, Tensor& dx, bool accumulate) {
  const int64_t rows = dx.size(0), in = dx.size(1), out = index.out();
  const int64_t* offsets = index.inverse_offsets.data<int64_t>();
  const int64_t* columns = index.inverse_columns.data<int64_t>();
  visit_float(dy.dtype(), "scatter_add_columns", [&](auto tag) {
    using T = decltype(tag);
    const T* pd = dy.data<T>();
    T* px = dx.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < in; ++c) {
        T sum = T(0);
        for (int64_t p = offsets[c]; p < offsets[c + 1]; ++p) sum += pd[r * out + columns[p]];
        px[r * in + c] = accumulate ? px[r * in + c] + sum : sum;
      }
    }
  });
}

}  // namespace bb::cpu
