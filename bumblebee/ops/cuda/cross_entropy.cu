// Vocab-parallel cross entropy in pieces: row max, sum of exp and target
// logit, the loss from the (group-reduced) statistics, and the fused
// softmax-minus-onehot backward.
//
// The logits stay in their storage dtype (bfloat16) and are read row by row;
// only [N]-sized fp32 statistics are written, so no fp32 copy of the
// [N, V] logits ever exists. Between the pieces the caller all-reduces the
// statistics over the tensor-parallel group (max, then sums).
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/logits_checks.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

// Calls f(value) for every logit of one row, 8 at a time when VEC.
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void for_row(const T* row, int64_t v, F f) {
  if constexpr (VEC) {
    for (int64_t c = int64_t(threadIdx.x) * 8; c < v; c += int64_t(blockDim.x) * 8) {
      float x[8];
      load8(row + c, x);
#pragma unroll
      for (int i = 0; i < 8; ++i) f(x[i]);
    }
  } else {
    for (int64_t c = threadIdx.x; c < v; c += blockDim.x) f(to_float(row[c]));
  }
}

template <typename T, bool VEC>
__global__ void row_max_kernel(const T* __restrict__ logits, int64_t v, float* __restrict__ row_max) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  float m = -INFINITY;
  for_row<T, VEC>(logits + row * v, v, [&](float x) { m = fmaxf(m, x); });
  m = block_max(m, scratch);
  if (threadIdx.x == 0) row_max[row] = m;
}

template <typename T, typename I, bool VEC>
__global__ void sumexp_target_kernel(const T* __restrict__ logits, const float* __restrict__ row_max,
                                     const I* __restrict__ labels, int64_t vocab_start, int64_t v,
                                     float* __restrict__ sumexp, float* __restrict__ target_logit) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float m = row_max[row];
  float s = 0.f;
  for_row<T, VEC>(logits + row * v, v, [&](float x) { s += expf(x - m); });
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    sumexp[row] = s;
    // Zero when the label belongs to another rank (or is masked), so the sum
    // over ranks is the target logit.
    const int64_t local = int64_t(labels[row]) - vocab_start;
    target_logit[row] = (local >= 0 && local < v) ? to_float(logits[row * v + local]) : 0.f;
  }
}

// dlogits may alias logits: each element is read, then written, by one thread.
template <typename T, typename I, int W>
__global__ void cross_entropy_backward_kernel(const T* logits, const I* __restrict__ labels, int64_t vocab_start,
                                              const float* __restrict__ lse, const float* __restrict__ dloss,
                                              int64_t rows, int64_t v, T* dlogits) {
  const int64_t groups_per_row = v / W;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / groups_per_row, col = (g % groups_per_row) * W;
    const int64_t target = int64_t(labels[row]) - vocab_start;
    const float l = lse[row], d = dloss[row];
    float x[8];
    if constexpr (W == 8) load8(logits + row * v + col, x);
    else x[0] = to_float(logits[row * v + col]);
#pragma unroll
    for (int i = 0; i < W; ++i) x[i] = (expf(x[i] - l) - (col + i == target ? 1.f : 0.f)) * d;
    if constexpr (W == 8) store8(dlogits + row * v + col, x);
    else dlogits[row * v + col] = from_float<T>(x[0]);
  }
}

__global__ void cross_entropy_loss_kernel(const float* __restrict__ row_max, const float* __restrict__ sumexp,
                                          const float* __restrict__ target_logit, int64_t rows, float* __restrict__ lse,
                                          float* __restrict__ loss) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const float l = row_max[r] + logf(sumexp[r]);
    lse[r] = l;
    loss[r] = l - target_logit[r];
  }
}

}  // namespace

void logits_row_max(const Tensor& logits, Tensor& row_max) {
  const char* op = "logits_row_max";
  check_logits(op, logits);
  check_row_stat(op, logits, row_max, "row_max");
  const int64_t rows = logits.size(0), v = logits.size(1);
  if (rows == 0) return;
  BB_CHECK(v > 0, op, ": logits have no columns");
  DeviceGuard guard(logits.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(logits.raw());
    float* out = static_cast<float*>(row_max.raw());
    if (v % 8 == 0 && aligned16(p)) row_max_kernel<T, true><<<unsigned(rows), kThreads, 0, stream>>>(p, v, out);
    else row_max_kernel<T, false><<<unsigned(rows), kThreads, 0, stream>>>(p, v, out);
  });
  CUDA_CHECK_LAUNCH(op);
}

void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit) {
  const char* op = "logits_sumexp_target";
  check_softmax_stats(op, logits, labels, row_max, sumexp, target_logit);
  const int64_t rows = logits.size(0), v = logits.size(1);
  if (rows == 0) return;
  BB_CHECK(v > 0, op, ": logits have no columns");
  DeviceGuard guard(logits.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(labels.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const T* p = static_cast<const T*>(logits.raw());
      const float* m = static_cast<const float*>(row_max.raw());
      const I* lab = static_cast<const I*>(labels.raw());
      float* s = static_cast<float*>(sumexp.raw());
      float* t = static_cast<float*>(target_logit.raw());
      if (v % 8 == 0 && aligned16(p)) {
        sumexp_target_kernel<T, I, true><<<unsigned(rows), kThreads, 0, stream>>>(p, m, lab, vocab_start, v, s, t);
      } else {
        sumexp_target_kernel<T, I, false><<<unsigned(rows), kThreads, 0, stream>>>(p, m, lab, vocab_start, v, s, t);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  check_logits(op, logits);
  check_row_stat(op, logits, lse, "lse");
  check_row_stat(op, logits, dloss, "dloss");
  check_cuda_same(logits, labels, op, "labels");
  check_cuda_same(logits, dlogits, op, "dlogits");
  check_shape(labels, {logits.size(0)}, "cross_entropy_backward: labels");
  check_shape(dlogits, logits.shape(), "cross_entropy_backward: dlogits");
  BB_CHECK(dlogits.dtype() == logits.dtype(), op, ": dlogits is ", dtype_name(dlogits.dtype()), " but logits is ",
           dtype_name(logits.dtype()));
  const int64_t rows = logits.size(0), v = logits.size(1);
  if (rows * v == 0) return;
  DeviceGuard guard(logits.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(labels.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const T* p = static_cast<const T*>(logits.raw());
      const I* lab = static_cast<const I*>(labels.raw());
      const float* l = static_cast<const float*>(lse.raw());
      const float* d = static_cast<const float*>(dloss.raw());
      T* out = static_cast<T*>(dlogits.raw());
      if (v % 8 == 0 && aligned16(p) && aligned16(out)) {
        cross_entropy_backward_kernel<T, I, 8><<<grid_for(rows * v / 8, kThreads), kThreads, 0, stream>>>(
            p, lab, vocab_start, l, d, rows, v, out);
      } else {
        cross_entropy_backward_kernel<T, I, 1><<<grid_for(rows * v, kThreads), kThreads, 0, stream>>>(
            p, lab, vocab_start, l, d, rows, v, out);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss) {
  const char* op = "cross_entropy_loss";
  check_cuda(row_max, op, "row_max");
  BB_CHECK(row_max.dim() == 1, op, ": row_max must be [N], got ", shape_str(row_max.shape()));
  const Tensor& ref = row_max;
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{row_max, "row_max"}, {sumexp, "sumexp"},
                                {target_logit, "target_logit"}, {lse, "lse"}, {loss, "loss"}}) {
    check_cuda_same(ref, t, op, name);
    check_shape(t, ref.shape(), "cross_entropy_loss");
    BB_CHECK(t.dtype() == DType::F32, op, ": ", name, " must be float32 on CUDA, got ", dtype_name(t.dtype()));
  }
  const int64_t rows = row_max.numel();
  if (rows == 0) return;
  DeviceGuard guard(row_max.device().index);
  cross_entropy_loss_kernel<<<grid_for(rows, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<const float*>(row_max.raw()), static_cast<const float*>(sumexp.raw()),
      static_cast<const float*>(target_logit.raw()), rows, static_cast<float*>(lse.raw()),
      static_cast<float*>(loss.raw()));
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
