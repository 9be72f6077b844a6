// CPU AdamW step with torch.optim.AdamW semantics (decoupled weight decay,
// bias corrections folded into the step size and the denominator).
//
// The scalar factors are formed in double and every update runs in the
// compute type (the param's dtype when it is float64 or float32, float32 for
// a bfloat16 param), as torch does on the CPU, so a float64 run matches
// torch's float64 trajectory to rounding. Each tensor is read into the
// compute type and rounded to its own storage dtype once, on store
// (optimizer.exp_avg_dtype and friends); with every tensor in the compute
// type the loads and stores are exact and the arithmetic is unchanged.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "bumblebee/core/half.h"
#include "bumblebee/ops/cpu/cpu_ops.h"

namespace bb::cpu {
namespace {

// A bfloat16 element on the host: its 16 bits.
using Bf16Bits = uint16_t;

template <typename C, typename S>
C load(S x) {
  if constexpr (std::is_same_v<S, Bf16Bits>) return C(bf16_to_float(x));
  else return C(x);
}

template <typename S, typename C>
S store(C x) {
  if constexpr (std::is_same_v<S, Bf16Bits>) return float_to_bf16(float(x));
  else return S(x);
}

template <typename C, typename P, typename G, typename M, typename V>
void adamw_kernel(P* p, const G* g, M* m, V* v, int64_t n, const ops::AdamWParams& hp) {
  const double steps = double(hp.step);
  const C decay = C(1.0 - hp.lr * hp.weight_decay);
  const C beta1 = C(hp.beta1), beta2 = C(hp.beta2);
  const C one_minus_beta1 = C(1.0 - hp.beta1), one_minus_beta2 = C(1.0 - hp.beta2);
  const C step_size = C(hp.lr / (1.0 - std::pow(hp.beta1, steps)));
  const C bias_correction2_sqrt = C(std::sqrt(1.0 - std::pow(hp.beta2, steps)));
  const C eps = C(hp.eps), grad_scale = C(hp.grad_scale);
  for (int64_t i = 0; i < n; ++i) {
    const C gi = load<C>(g[i]) * grad_scale;
    C pi = load<C>(p[i]), mi = load<C>(m[i]), vi = load<C>(v[i]);
    pi *= decay;
    mi = beta1 * mi + one_minus_beta1 * gi;
    vi = beta2 * vi + one_minus_beta2 * gi * gi;
    pi -= step_size * mi / (std::sqrt(vi) / bias_correction2_sqrt + eps);
    p[i] = store<P>(pi);
    m[i] = store<M>(mi);
    v[i] = store<V>(vi);
  }
}

// Calls fn(S{}) with S the host storage type of a float32 or bfloat16 tensor.
template <typename Fn>
void visit_f32_or_bf16(DType dt, Fn&& fn) {
  if (dt == DType::BF16) fn(Bf16Bits{});
  else fn(float{});
}

template <typename S>
S* elements(const Tensor& t) {
  return static_cast<S*>(t.raw());
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const ops::AdamWParams& hp) {
  // ops::adamw_step admitted the combination (ops.h): all float64, or each
  // tensor float32 or bfloat16.
  const int64_t n = param.numel();
  if (param.dtype() == DType::F64) {
    adamw_kernel<double>(param.data<double>(), grad.data<double>(), exp_avg.data<double>(), exp_avg_sq.data<double>(),
                         n, hp);
    return;
  }
  visit_f32_or_bf16(param.dtype(), [&](auto p_tag) {
    visit_f32_or_bf16(grad.dtype(), [&](auto g_tag) {
      visit_f32_or_bf16(exp_avg.dtype(), [&](auto m_tag) {
        visit_f32_or_bf16(exp_avg_sq.dtype(), [&](auto v_tag) {
          adamw_kernel<float>(elements<decltype(p_tag)>(param), elements<const decltype(g_tag)>(grad),
                              elements<decltype(m_tag)>(exp_avg), elements<decltype(v_tag)>(exp_avg_sq), n, hp);
        });
      });
    });
  });
}

}  // namespace bb::cpu
