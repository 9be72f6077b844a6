// CPU vocab-parallel embedding: row gather forward, row scatter-add backward.
#include <algorithm>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void embedding_forward(const Tensor& weight, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  const std::vector<int64_t> id = read_indices(ids, "embedding_forward");
  const int64_t vocab_local = weight.size(0), hidden = weight.size(1);
  visit_float(out.dtype(), "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* w = weight.data<T>();
    T* o = out.data<T>();
    for (size_t i = 0; i < id.size(); ++i) {
      const int64_t row = id[i] - vocab_start;
      T* dst = o + int64_t(i) * hidden;
      if (row >= 0 && row < vocab_local) {
        std::copy(w + row * hidden, w + (row + 1) * hidden, dst);
      } else {
        std::fill(dst, dst + hidden, T(0));
      }
    }
  });
}

void embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight) {
  const std::vector<int64_t> id = read_indices(ids, "embedding_backward");
  const int64_t vocab_local = grad_weight.size(0), hidden = grad_weight.size(1);
  visit_float(grad_weight.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad_out.data<T>();
    T* gw = grad_weight.data<T>();
    for (size_t i = 0; i < id.size(); ++i) {
      const int64_t row = id[i] - vocab_start;
      if (row < 0 || row >= vocab_local) continue;
      const T* src = g + int64_t(i) * hidden;
      T* dst = gw + row * hidden;
      for (int64_t j = 0; j < hidden; ++j) dst[j] += src[j];
    }
  });
}

}  // namespace bb::cpu
