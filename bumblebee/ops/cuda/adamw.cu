// Fused AdamW (torch.optim.AdamW semantics) over one flat buffer.
//
// The optimizer keeps every parameter's fp32 master copy, gradient, exp_avg
// and exp_avg_sq as views into flat buffers, so one launch over the whole
// buffer is the multi-tensor step: one read of p, g, m, v and one write of
// p, m, v per element, and no per-tensor launches. Bias corrections are
// computed once on the host in double.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

#include <cmath>

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

template <typename P, typename G>
__global__ void adamw_kernel(P* __restrict__ param, const G* __restrict__ grad, P* __restrict__ exp_avg,
                             P* __restrict__ exp_avg_sq, int64_t n, const AdamWCoefficients<P> k) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    P p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    P g;
    if constexpr (std::is_same_v<G, bf16>) g = P(__bfloat162float(grad[i]));
    else g = P(grad[i]);
    adamw_update<P>(p, g, m, v, k);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
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
  check_dtype_in(param, op, "param", {DType::F32, DType::F64});
  BB_CHECK(exp_avg.dtype() == param.dtype() && exp_avg_sq.dtype() == param.dtype(), op,
           ": exp_avg and exp_avg_sq must have param's dtype ", dtype_name(param.dtype()));
  if (param.dtype() == DType::F32) check_dtype_in(grad, op, "grad", {DType::F32, DType::BF16});
  else check_dtype_in(grad, op, "grad", {DType::F64, DType::F32});
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  cudaStream_t stream = current_stream();
  if (param.dtype() == DType::F32) {
    const AdamWCoefficients<float> k = coefficients<float>(hp);
    float* p = static_cast<float*>(param.raw());
    float* m = static_cast<float*>(exp_avg.raw());
    float* v = static_cast<float*>(exp_avg_sq.raw());
    if (grad.dtype() == DType::F32) {
      const float* g = static_cast<const float*>(grad.raw());
      if (n % 4 == 0 && aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
        adamw_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads, 0, stream>>>(
            reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(m),
            reinterpret_cast<float4*>(v), n / 4, k);
      } else {
        adamw_kernel<float, float><<<grid_for(n, kThreads), kThreads, 0, stream>>>(p, g, m, v, n, k);
      }
    } else {
      adamw_kernel<float, bf16><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          p, static_cast<const bf16*>(grad.raw()), m, v, n, k);
    }
  } else {
    const AdamWCoefficients<double> k = coefficients<double>(hp);
    double* p = static_cast<double*>(param.raw());
    double* m = static_cast<double*>(exp_avg.raw());
    double* v = static_cast<double*>(exp_avg_sq.raw());
    if (grad.dtype() == DType::F64) {
      adamw_kernel<double, double><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          p, static_cast<const double*>(grad.raw()), m, v, n, k);
    } else {
      adamw_kernel<double, float><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
          p, static_cast<const float*>(grad.raw()), m, v, n, k);
    }
  }
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
