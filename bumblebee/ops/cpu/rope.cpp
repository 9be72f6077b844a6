// CPU rotary position embedding, rotate-half layout (HF Llama / Qwen).
//
// The angle position * inv_freq[i] and its cos/sin are formed in double, so
// the oracle carries no angle error (a float32 angle loses digits at large
// positions); only the rotation itself runs in the tensor dtype.
#include <cmath>
#include <vector>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {
namespace {

// Rotates every (i, i + D/2) pair of x by +angle (sign = 1) or -angle (sign = -1).
// Each pair is read before it is written, so out may alias x.
void rotate(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out, double sign,
            const char* op) {
  const std::vector<int64_t> pos = read_indices(position_ids, op);
  const int64_t tokens = x.size(0), heads = x.size(1), half = x.size(2) / 2, d = x.size(2);
  const double* freq = inv_freq.data<double>();
  visit_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    std::vector<T> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(pos[size_t(t)]) * freq[i];
        cos_t[size_t(i)] = T(std::cos(angle));
        sin_t[size_t(i)] = T(sign * std::sin(angle));
      }
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = (t * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const T x1 = px[base + i], x2 = px[base + half + i];
          const T c = cos_t[size_t(i)], s = sin_t[size_t(i)];
          po[base + i] = x1 * c - x2 * s;
          po[base + half + i] = x2 * c + x1 * s;
        }
      }
    }
  });
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out) {
  rotate(x, position_ids, inv_freq, out, 1.0, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx) {
  rotate(dy, position_ids, inv_freq, dx, -1.0, "rope_backward");
}

}  // namespace bb::cpu
