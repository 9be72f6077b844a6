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
#include <cstdint>
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

// Four consecutive elements of one storage dtype, moved as one 16-byte
// (float32) or 8-byte (bfloat16) access.
template <typename S>
struct alignas(4 * sizeof(S)) Pack4 {
  S v[4];
};

// The same update four elements a thread: every float32/bfloat16 mix runs at
// the bandwidth of its bytes (the one-element loop above issues 2-byte loads
// for bfloat16 state and measured no faster than float32 state).
template <typename C, typename P, typename G, typename M, typename V>
__global__ void adamw_pack4_kernel(Pack4<P>* __restrict__ param, const Pack4<G>* __restrict__ grad,
                                   Pack4<M>* __restrict__ exp_avg, Pack4<V>* __restrict__ exp_avg_sq, int64_t n4,
                                   const AdamWCoefficients<C> k) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    Pack4<P> p = param[i];
    const Pack4<G> g = grad[i];
    Pack4<M> m = exp_avg[i];
    Pack4<V> v = exp_avg_sq[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      C pj = load<C>(p.v[j]), mj = load<C>(m.v[j]), vj = load<C>(v.v[j]);
      adamw_update<C>(pj, load<C>(g.v[j]), mj, vj, k);
      p.v[j] = store<P>(pj);
      m.v[j] = store<M>(mj);
      v.v[j] = store<V>(vj);
    }
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

template <typename S>
bool packable(const Tensor& t) {
  return (reinterpret_cast<uintptr_t>(t.raw()) % sizeof(Pack4<S>)) == 0;
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
  if (param.dtype() == DType::F64) {
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
            if (n % 4 == 0 && packable<P>(param) && packable<G>(grad) && packable<M>(exp_avg) &&
                packable<V>(exp_avg_sq))
              adamw_pack4_kernel<float, P, G, M, V><<<grid_for(n / 4, kThreads), kThreads, 0, stream>>>(
                  static_cast<Pack4<P>*>(param.raw()), static_cast<const Pack4<G>*>(grad.raw()),
                  static_cast<Pack4<M>*>(exp_avg.raw()), static_cast<Pack4<V>*>(exp_avg_sq.raw()), n / 4, k);
            else
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
