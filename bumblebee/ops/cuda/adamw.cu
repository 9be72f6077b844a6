// Fused AdamW (torch.optim.AdamW semantics) over one flat buffer.
//
// The optimizer keeps every parameter's master copy (or the bf16 parameters
// themselves), gradient, exp_avg and exp_avg_sq as views into flat buffers,
// each in its own storage dtype, so one launch over the whole
// buffer is the multi-tensor step: one read of p, g, m, v and one write of
// p, m, v per element, and no per-tensor launches. Bias corrections are
// computed once on the host in double.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

#include <cmath>
#include <type_traits>

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

template <typename C>
struct AdamWCoefficients {
  C decay;          // 1 - lr * weight_decay
  C beta1, beta2;
  C grad_scale;
  C step_size;      // lr / (1 - beta1^step)
  C inv_bc2_sqrt;   // 1 / sqrt(1 - beta2^step)
  C eps;
};

template <typename C>
__device__ __forceinline__ void adamw_update(C& p, C g, C& m, C& v, const AdamWCoefficients<C>& k) {
  p *= k.decay;
  g *= k.grad_scale;
  m = k.beta1 * m + (C(1) - k.beta1) * g;
  v = k.beta2 * v + (C(1) - k.beta2) * g * g;
  p -= k.step_size * m / (sqrt(v) * k.inv_bc2_sqrt + k.eps);
}

template <typename C, typename S>
__device__ __forceinline__ C load(S x) {
  if constexpr (std::is_same_v<S, bf16>) return C(__bfloat162float(x));
  else return C(x);
}

// Round to the storage dtype once, on store: bfloat16 to nearest even, as
// torch's bf16 stores do.
template <typename S, typename C>
__device__ __forceinline__ S store(C x) {
  if constexpr (std::is_same_v<S, bf16>) return __float2bfloat16_rn(float(x));
  else return S(x);
}

// One kernel for every storage combination (ops.h): the update runs in C
// registers on the unrounded moments; each tensor rounds on store.
template <typename C, typename P, typename G, typename M, typename V>
__global__ void adamw_kernel(P* __restrict__ param, const G* __restrict__ grad, M* __restrict__ exp_avg,
                             V* __restrict__ exp_avg_sq, int64_t n, const AdamWCoefficients<C> k) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    C p = load<C>(param[i]), m = load<C>(exp_avg[i]), v = load<C>(exp_avg_sq[i]);
    adamw_update<C>(p, load<C>(grad[i]), m, v, k);
    param[i] = store<P>(p);
    exp_avg[i] = store<M>(m);
    exp_avg_sq[i] = store<V>(v);
  }
}

// float32 everything, four elements per thread through 16-byte accesses.
__global__ void adamw_vec4_kernel(float4* __restrict__ param, const float4* __restrict__ grad,
                                  float4* __restrict__ exp_avg, float4* __restrict__ exp_avg_sq, int64_t n4,
                                  const AdamWCoefficients<float> k) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 p = param[i], g = grad[i], m = exp_avg[i], v = exp_avg_sq[i];
    adamw_update<float>(p.x, g.x, m.x, v.x, k);
    adamw_update<float>(p.y, g.y, m.y, v.y, k);
    adamw_update<float>(p.z, g.z, m.z, v.z, k);
    adamw_update<float>(p.w, g.w, m.w, v.w, k);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

template <typename C>
AdamWCoefficients<C> coefficients(const ops::AdamWParams& hp) {
  const double bc1 = 1.0 - std::pow(hp.beta1, double(hp.step));
  const double bc2 = 1.0 - std::pow(hp.beta2, double(hp.step));
  return {C(1.0 - hp.lr * hp.weight_decay), C(hp.beta1),     C(hp.beta2), C(hp.grad_scale),
          C(hp.lr / bc1),                   C(1.0 / std::sqrt(bc2)), C(hp.eps)};
}

// Calls fn(S{}) with S the element type of a float32 or bfloat16 tensor.
template <typename Fn>
void visit_f32_or_bf16(DType dt, Fn&& fn) {
  if (dt == DType::BF16) fn(bf16{});
  else fn(float{});
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const ops::AdamWParams& hp) {
  const char* op = "adamw_step";
  check_cuda(param, op, "param");
  check_cuda_same(param, grad, op, "grad");
  check_cuda_same(param, exp_avg, op, "exp_avg");
  check_cuda_same(param, exp_avg_sq, op, "exp_avg_sq");
  const int64_t n = param.numel();
  BB_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n, op,
           ": param, grad, exp_avg, exp_avg_sq differ in size (", n, ", ", grad.numel(), ", ", exp_avg.numel(), ", ",
           exp_avg_sq.numel(), ")");
  BB_CHECK(hp.step >= 1, op, ": step is 1-based, got ", hp.step);
  // ops::adamw_step admitted the combination (ops.h).
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  cudaStream_t stream = current_stream();
  const bool all_f32 = param.dtype() == DType::F32 && grad.dtype() == DType::F32 && exp_avg.dtype() == DType::F32 &&
                       exp_avg_sq.dtype() == DType::F32;
  if (all_f32 && n % 4 == 0 && aligned16(param.raw()) && aligned16(grad.raw()) && aligned16(exp_avg.raw()) &&
      aligned16(exp_avg_sq.raw())) {
    adamw_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads, 0, stream>>>(
        static_cast<float4*>(param.raw()), static_cast<const float4*>(grad.raw()), static_cast<float4*>(exp_avg.raw()),
        static_cast<float4*>(exp_avg_sq.raw()), n / 4, coefficients<float>(hp));
  } else if (param.dtype() == DType::F64) {
    const AdamWCoefficients<double> k = coefficients<double>(hp);
    double* p = static_cast<double*>(param.raw());
    double* m = static_cast<double*>(exp_avg.raw());
    double* v = static_cast<double*>(exp_avg_sq.raw());
    if (grad.dtype() == DType::F64)
      adamw_kernel<double, double, double, double, double><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          p, static_cast<const double*>(grad.raw()), m, v, n, k);
    else
      adamw_kernel<double, double, float, double, double><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          p, static_cast<const float*>(grad.raw()), m, v, n, k);
  } else {
    const AdamWCoefficients<float> k = coefficients<float>(hp);
    visit_f32_or_bf16(param.dtype(), [&](auto p_tag) {
      visit_f32_or_bf16(grad.dtype(), [&](auto g_tag) {
        visit_f32_or_bf16(exp_avg.dtype(), [&](auto m_tag) {
          visit_f32_or_bf16(exp_avg_sq.dtype(), [&](auto v_tag) {
            using P = decltype(p_tag);
            using G = decltype(g_tag);
            using M = decltype(m_tag);
            using V = decltype(v_tag);
            adamw_kernel<float, P, G, M, V><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
                static_cast<P*>(param.raw()), static_cast<const G*>(grad.raw()), static_cast<M*>(exp_avg.raw()),
                static_cast<V*>(exp_avg_sq.raw()), n, k);
          });
        });
      });
    });
  }
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
