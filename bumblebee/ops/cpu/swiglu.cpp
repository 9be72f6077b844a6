// CPU SwiGLU: out = silu(gate) * up over a fused [N, 2F] gate_up tensor.
#include <cmath>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {
namespace {
template <typename T>
T sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}
}  // namespace

void swiglu_forward(const Tensor& gate_up, Tensor& out) {
  const int64_t rows = out.size(0), f = out.size(1);
  visit_float(out.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* gu = gate_up.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) {
        const T g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j];
        po[r * f + j] = g * sigmoid(g) * u;
      }
    }
  });
}

// d silu(g) / dg = sig(g) * (1 + g * (1 - sig(g))).
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& d_gate_up) {
  const int64_t rows = dout.size(0), f = dout.size(1);
  visit_float(dout.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pd = dout.data<T>();
    const T* gu = gate_up.data<T>();
    T* dgu = d_gate_up.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) {
        const T g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j], d = pd[r * f + j];
        const T sig = sigmoid(g);
        dgu[r * 2 * f + j] = d * u * sig * (T(1) + g * (T(1) - sig));
        dgu[r * 2 * f + f + j] = d * g * sig;
      }
    }
  });
}

}  // namespace bb::cpu
