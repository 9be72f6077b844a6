// CPU AdamW step with torch.optim.AdamW semantics (decoupled weight decay,
// bias corrections folded into the step size and the denominator).
//
// The scalar factors are formed in double and every tensor update runs in the
// parameter dtype, as torch does on the CPU, so a float64 run matches torch's
// float64 trajectory to rounding.
#include <cmath>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const ops::AdamWParams& hp) {
  visit_float(param.dtype(), "adamw_step", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    const double steps = double(hp.step);
    const T decay = T(1.0 - hp.lr * hp.weight_decay);
    const T beta1 = T(hp.beta1), beta2 = T(hp.beta2);
    const T one_minus_beta1 = T(1.0 - hp.beta1), one_minus_beta2 = T(1.0 - hp.beta2);
    const T step_size = T(hp.lr / (1.0 - std::pow(hp.beta1, steps)));
    const T bias_correction2_sqrt = T(std::sqrt(1.0 - std::pow(hp.beta2, steps)));
    const T eps = T(hp.eps), grad_scale = T(hp.grad_scale);
    for (int64_t i = 0, n = param.numel(); i < n; ++i) {
      const T gi = g[i] * grad_scale;
      p[i] *= decay;
      m[i] = beta1 * m[i] + one_minus_beta1 * gi;
      v[i] = beta2 * v[i] + one_minus_beta2 * gi * gi;
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bias_correction2_sqrt + eps);
    }
  });
}

}  // namespace bb::cpu
