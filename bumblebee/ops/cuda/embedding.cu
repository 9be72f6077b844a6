// Vocab-parallel embedding: row gather forward, fp32 scatter-add backward.
//
// Ids outside [vocab_start, vocab_start + V_local) belong to another
// tensor-parallel rank: forward writes zeros for them and backward skips them.
// Backward adds into the fp32 gradient with atomics, because repeated tokens
// hit the same row; the adds of different tokens to one row rarely collide.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per group of 8 columns of one output row (H % 8 == 0, aligned).
template <typename T, typename I>
__global__ void embedding_forward_vec8_kernel(const T* __restrict__ weight, const I* __restrict__ ids,
                                              int64_t vocab_start, int64_t vocab_local, int64_t hidden,
                                              int64_t rows, T* __restrict__ out) {
  const int64_t groups_per_row = hidden / 8;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / groups_per_row, col = (g % groups_per_row) * 8;
    const int64_t local = int64_t(ids[row]) - vocab_start;
    constexpr int N = Pack16<T>::N;
    if (local >= 0 && local < vocab_local) {
      const T* src = weight + local * hidden + col;
      for (int j = 0; j < 8; j += N) store_pack(out + row * hidden + col + j, load_pack(src + j));
    } else {
      Pack16<T> zero;
      for (int i = 0; i < N; ++i) zero.v[i] = from_float<T>(0.f);
      for (int j = 0; j < 8; j += N) store_pack(out + row * hidden + col + j, zero);
    }
  }
}

template <typename T, typename I>
__global__ void embedding_forward_kernel(const T* __restrict__ weight, const I* __restrict__ ids, int64_t vocab_start,
                                         int64_t vocab_local, int64_t hidden, int64_t rows, T* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden, col = i % hidden;
    const int64_t local = int64_t(ids[row]) - vocab_start;
    out[i] = (local >= 0 && local < vocab_local) ? weight[local * hidden + col] : from_float<T>(0.f);
  }
}

template <typename T, typename I>
__global__ void embedding_backward_kernel(const T* __restrict__ grad_out, const I* __restrict__ ids,
                                          int64_t vocab_start, int64_t vocab_local, int64_t hidden, int64_t rows,
                                          float* __restrict__ grad_weight) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden, col = i % hidden;
    const int64_t local = int64_t(ids[row]) - vocab_start;
    if (local >= 0 && local < vocab_local) atomicAdd(grad_weight + local * hidden + col, to_float(grad_out[i]));
  }
}

}  // namespace

void embedding_forward(const Tensor& weight, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding_forward";
  check_cuda(weight, op, "weight");
  check_cuda_same(weight, ids, op, "ids");
  check_cuda_same(weight, out, op, "out");
  BB_CHECK(weight.dim() == 2, op, ": weight must be [V_local, H], got ", shape_str(weight.shape()));
  BB_CHECK(ids.dim() == 1, op, ": ids must be [N], got ", shape_str(ids.shape()));
  const int64_t vocab_local = weight.size(0), hidden = weight.size(1), rows = ids.size(0);
  check_shape(out, {rows, hidden}, "embedding_forward: out");
  BB_CHECK(out.dtype() == weight.dtype(), op, ": out is ", dtype_name(out.dtype()), " but weight is ",
           dtype_name(weight.dtype()));
  if (rows * hidden == 0) return;
  DeviceGuard guard(weight.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(weight.dtype(), op, [&](auto wtag) {
    using T = decltype(wtag);
    dispatch_index(ids.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const T* w = static_cast<const T*>(weight.raw());
      const I* id = static_cast<const I*>(ids.raw());
      T* o = static_cast<T*>(out.raw());
      if (hidden % 8 == 0 && aligned16(w) && aligned16(o)) {
        embedding_forward_vec8_kernel<<<grid_for(rows * hidden / 8, kThreads), kThreads, 0, stream>>>(
            w, id, vocab_start, vocab_local, hidden, rows, o);
      } else {
        embedding_forward_kernel<<<grid_for(rows * hidden, kThreads), kThreads, 0, stream>>>(
            w, id, vocab_start, vocab_local, hidden, rows, o);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

void embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight) {
  const char* op = "embedding_backward";
  check_cuda(grad_out, op, "grad_out");
  check_cuda_same(grad_out, ids, op, "ids");
  check_cuda_same(grad_out, grad_weight, op, "grad_weight");
  BB_CHECK(grad_weight.dim() == 2, op, ": grad_weight must be [V_local, H], got ", shape_str(grad_weight.shape()));
  BB_CHECK(ids.dim() == 1, op, ": ids must be [N], got ", shape_str(ids.shape()));
  const int64_t vocab_local = grad_weight.size(0), hidden = grad_weight.size(1), rows = ids.size(0);
  check_shape(grad_out, {rows, hidden}, "embedding_backward: grad_out");
  check_dtype(grad_weight, DType::F32, "embedding_backward: grad_weight");
  if (rows * hidden == 0) return;
  DeviceGuard guard(grad_out.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(grad_out.dtype(), op, [&](auto gtag) {
    using T = decltype(gtag);
    dispatch_index(ids.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      embedding_backward_kernel<<<grid_for(rows * hidden, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(grad_out.raw()), static_cast<const I*>(ids.raw()), vocab_start, vocab_local, hidden,
          rows, static_cast<float*>(grad_weight.raw()));
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
