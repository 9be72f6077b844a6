// CUDA entropy of the vocab-parallel softmax: a shard's sum of exp(z - max) z
// (one block per row, like logits_sumexp_target), the entropy from the
// group-reduced sums, and the backward of a loss over the cross entropy and
// the entropy together (ops.h has the formulas). Logits stay in their storage
// dtype; statistics are float32.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/logits_checks.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void zexp_sum_kernel(const T* __restrict__ logits, const float* __restrict__ row_max, int64_t v,
                                float* __restrict__ zexp_sum) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float m = row_max[row];
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < v; c += blockDim.x) {
    const float z = to_float(logits[row * v + c]);
    s += expf(z - m) * z;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) zexp_sum[row] = s;
}

__global__ void entropy_from_sums_kernel(const float* __restrict__ lse, const float* __restrict__ sumexp,
                                         const float* __restrict__ zexp_sum, int64_t rows, float* __restrict__ entropy) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    entropy[r] = lse[r] - zexp_sum[r] / sumexp[r];
}

// dlogits may alias logits: each element is read, then written, by one thread.
template <typename T, typename I>
__global__ void backward_kernel(const T* logits, const I* __restrict__ labels, int64_t vocab_start,
                                const float* __restrict__ lse, const float* __restrict__ entropy,
                                const float* __restrict__ dloss, const float* __restrict__ dentropy, int64_t rows,
                                int64_t v, T* dlogits) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * v; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / v, col = i % v;
    const float l = lse[row];
    const float z = to_float(logits[i]);
    const float p = expf(z - l);
    const float onehot = col == int64_t(labels[row]) - vocab_start ? 1.f : 0.f;
    dlogits[i] = from_float<T>((p - onehot) * dloss[row] - dentropy[row] * p * (z - (l - entropy[row])));
  }
}

}  // namespace

void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum) {
  const char* op = "logits_zexp_sum";
  check_cuda(logits, op, "logits");
  BB_CHECK(logits.dim() == 2 && logits.size(0) <= INT32_MAX, op, ": logits must be [N, V_local] with N < 2^31, got ",
           shape_str(logits.shape()));
  check_row_stat(op, logits, row_max, "row_max");
  check_row_stat(op, logits, zexp_sum, "zexp_sum");
  const int64_t rows = logits.size(0), v = logits.size(1);
  if (rows == 0) return;
  DeviceGuard guard(logits.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    zexp_sum_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(static_cast<const T*>(logits.raw()),
                                                                static_cast<const float*>(row_max.raw()), v,
                                                                static_cast<float*>(zexp_sum.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
}

void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy) {
  const char* op = "entropy_from_sums";
  check_cuda(lse, op, "lse");
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{lse, "lse"}, {sumexp, "sumexp"},
                                {zexp_sum, "zexp_sum"}, {entropy, "entropy"}})
    check_row_stat(op, lse, t, name);
  const int64_t rows = lse.numel();
  if (rows == 0) return;
  DeviceGuard guard(lse.device().index);
  entropy_from_sums_kernel<<<grid_for(rows, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<const float*>(lse.raw()), static_cast<const float*>(sumexp.raw()),
      static_cast<const float*>(zexp_sum.raw()), rows, static_cast<float*>(entropy.raw()));
  CUDA_CHECK_LAUNCH(op);
}

void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits) {
  const char* op = "cross_entropy_entropy_backward";
  check_cuda(logits, op, "logits");
  BB_CHECK(logits.dim() == 2, op, ": logits must be [N, V_local], got ", shape_str(logits.shape()));
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{lse, "lse"}, {entropy, "entropy"},
                                {dloss, "dloss"}, {dentropy, "dentropy"}})
    check_row_stat(op, logits, t, name);
  check_cuda_same(logits, labels, op, "labels");
  check_cuda_same(logits, dlogits, op, "dlogits");
  check_shape(labels, {logits.size(0)}, "cross_entropy_entropy_backward: labels");
  check_shape(dlogits, logits.shape(), "cross_entropy_entropy_backward: dlogits");
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
      backward_kernel<T, I><<<grid_for(rows * v, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(logits.raw()), static_cast<const I*>(labels.raw()), vocab_start,
          static_cast<const float*>(lse.raw()), static_cast<const float*>(entropy.raw()),
          static_cast<const float*>(dloss.raw()), static_cast<const float*>(dentropy.raw()), rows, v,
          static_cast<T*>(dlogits.raw()));
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
