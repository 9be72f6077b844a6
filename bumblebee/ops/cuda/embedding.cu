// Vocab-parallel embedding: row gather forward, scatter-add backward in fp32.
//
// Ids outside [vocab_start, vocab_start + V_local) belong to another
// tensor-parallel rank: forward writes zeros for them and backward skips them.
// Backward adds into the fp32 gradient with atomics, because repeated tokens
// hit the same row; the adds of different tokens to one row rarely collide.
// Their order varies from run to run, so under deterministic mode
// (backend.deterministic, ops/deterministic.h) backward instead sorts the
// rows by id (a stable radix sort, as moe_permute.cu) and one thread per
// column of each id sums that id's rows in row order: the same bits on every
// run, at the price of the sort and of a serial sum over a much-repeated id.
// A bfloat16 gradient (optimizer.main_grads_dtype=bf16) takes the sorted path
// too: each id's rows are summed in fp32 and added to the row once, where
// bfloat16 atomics would round at every repeated token.
//
// Forward takes the weight's dtype (TW) apart from out's (TO): a bfloat16
// table can fill a float32 residual stream, each row converted exactly.

#include <limits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/radix_sort.cuh"
#include "bumblebee/ops/deterministic.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per group of 8 columns of one output row (H % 8 == 0, aligned).
// One dtype copies the 16-byte packs as they are; bfloat16 into float32 goes
// through load8/store8, whose conversion is exact.
template <typename TW, typename TO, typename I>
__global__ void embedding_forward_vec8_kernel(const TW* __restrict__ weight, const I* __restrict__ ids,
                                              int64_t vocab_start, int64_t vocab_local, int64_t hidden,
                                              int64_t rows, TO* __restrict__ out) {
  const int64_t groups_per_row = hidden / 8;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / groups_per_row, col = (g % groups_per_row) * 8;
    const int64_t local = int64_t(ids[row]) - vocab_start;
    TO* dst = out + row * hidden + col;
    constexpr int N = Pack16<TO>::N;
    if (local >= 0 && local < vocab_local) {
      const TW* src = weight + local * hidden + col;
      if constexpr (std::is_same_v<TW, TO>) {
        for (int j = 0; j < 8; j += N) store_pack(dst + j, load_pack(src + j));
      } else {
        float v[8];
        load8(src, v);
        store8(dst, v);
      }
    } else {
      Pack16<TO> zero;
      for (int i = 0; i < N; ++i) zero.v[i] = from_float<TO>(0.f);
      for (int j = 0; j < 8; j += N) store_pack(dst + j, zero);
    }
  }
}

template <typename TW, typename TO, typename I>
__global__ void embedding_forward_kernel(const TW* __restrict__ weight, const I* __restrict__ ids,
                                         int64_t vocab_start, int64_t vocab_local, int64_t hidden, int64_t rows,
                                         TO* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden, col = i % hidden;
    const int64_t local = int64_t(ids[row]) - vocab_start;
    if (local < 0 || local >= vocab_local) {
      out[i] = from_float<TO>(0.f);
    } else if constexpr (std::is_same_v<TW, TO>) {
      out[i] = weight[local * hidden + col];
    } else {
      out[i] = from_float<TO>(to_float(weight[local * hidden + col]));
    }
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

// Sort keys: the row's local id, or vocab_local for an id of another rank,
// so those rows sort after every local id's and are skipped.
template <typename I>
__global__ void embedding_keys_kernel(const I* __restrict__ ids, int64_t vocab_start, int64_t vocab_local,
                                      int64_t rows, int32_t* __restrict__ keys, int32_t* __restrict__ row_ids) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t local = int64_t(ids[i]) - vocab_start;
    keys[i] = (local >= 0 && local < vocab_local) ? int32_t(local) : int32_t(vocab_local);
    row_ids[i] = int32_t(i);
  }
}

// One thread per (sorted position p, column): the thread at the first
// position of an id's run sums the run's rows in order and adds the sum to
// the id's gradient row, which no other thread touches.
template <typename T, typename G>
__global__ void embedding_backward_sorted_kernel(const T* __restrict__ grad_out, const int32_t* __restrict__ keys,
                                                 const int32_t* __restrict__ sorted_rows, int64_t vocab_local,
                                                 int64_t hidden, int64_t rows, G* __restrict__ grad_weight) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / hidden, col = i % hidden;
    const int32_t key = keys[p];
    if (key == vocab_local || (p > 0 && keys[p - 1] == key)) continue;
    float sum = 0.f;
    for (int64_t q = p; q < rows && keys[q] == key; ++q)
      sum += to_float(grad_out[int64_t(sorted_rows[q]) * hidden + col]);
    G& g = grad_weight[int64_t(key) * hidden + col];
    g = from_float<G>(to_float(g) + sum);
  }
}

// weight and out share a dtype (bfloat16 or float32), or a bfloat16 weight
// fills a float32 out.
void check_weight_out_dtypes(DType weight, DType out, const char* op) {
  const bool same = weight == out && (weight == DType::BF16 || weight == DType::F32);
  BB_CHECK(same || (weight == DType::BF16 && out == DType::F32), op,
           ": CUDA takes weight and out both bfloat16 or both float32, or weight bfloat16 with out float32; "
           "got weight ", dtype_name(weight), ", out ", dtype_name(out));
}

// Calls f(TW{}, TO{}) for dtypes check_weight_out_dtypes accepted.
template <typename F>
void dispatch_weight_out(DType weight, DType out, const char* op, F&& f) {
  if (weight == DType::BF16 && out == DType::F32) f(bf16{}, float{});
  else dispatch_activation(weight, op, [&](auto tag) { f(tag, tag); });
}

// The sorted backward (deterministic mode, bfloat16 gradients); rows * hidden > 0.
void embedding_backward_sorted(const Tensor& grad_out, const Tensor& ids, int64_t vocab_start, Tensor& grad_weight,
                               cudaStream_t stream) {
  const char* op = "embedding_backward (sorted)";
  const int64_t vocab_local = grad_weight.size(0), hidden = grad_weight.size(1), rows = ids.size(0);
  BB_CHECK(rows < std::numeric_limits<int32_t>::max() && vocab_local < std::numeric_limits<int32_t>::max(), op,
           ": the sort indexes rows and ids with int32, got ", rows, " rows and ", vocab_local, " ids");
  const Device dev = grad_out.device();
  Tensor keys = Tensor::empty({rows}, DType::I32, dev), row_ids = Tensor::empty({rows}, DType::I32, dev);
  Tensor sorted_keys = Tensor::empty({rows}, DType::I32, dev), sorted_rows = Tensor::empty({rows}, DType::I32, dev);
  dispatch_index(ids.dtype(), op, [&](auto itag) {
    using I = decltype(itag);
    embedding_keys_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(
        static_cast<const I*>(ids.raw()), vocab_start, vocab_local, rows, keys.data<int32_t>(),
        row_ids.data<int32_t>());
  });
  CUDA_CHECK_LAUNCH(op);
  sort_pairs_by_key(keys, row_ids, rows, vocab_local, sorted_keys, sorted_rows, stream);
  dispatch_activation(grad_out.dtype(), op, [&](auto gtag) {
    using T = decltype(gtag);
    dispatch_activation(grad_weight.dtype(), op, [&](auto wtag) {
      using G = decltype(wtag);
      embedding_backward_sorted_kernel<<<grid_for(rows * hidden, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(grad_out.raw()), sorted_keys.data<int32_t>(), sorted_rows.data<int32_t>(),
          vocab_local, hidden, rows, static_cast<G*>(grad_weight.raw()));
    });
  });
  CUDA_CHECK_LAUNCH(op);
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
  check_weight_out_dtypes(weight.dtype(), out.dtype(), op);
  if (rows * hidden == 0) return;
  DeviceGuard guard(weight.device().index);
  cudaStream_t stream = current_stream();
  dispatch_weight_out(weight.dtype(), out.dtype(), op, [&](auto wtag, auto otag) {
    using TW = decltype(wtag);
    using TO = decltype(otag);
    dispatch_index(ids.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const TW* w = static_cast<const TW*>(weight.raw());
      const I* id = static_cast<const I*>(ids.raw());
      TO* o = static_cast<TO*>(out.raw());
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
  check_dtype_in(grad_weight, op, "grad_weight", {DType::F32, DType::BF16});
  if (rows * hidden == 0) return;
  DeviceGuard guard(grad_out.device().index);
  cudaStream_t stream = current_stream();
  if (ops::deterministic() || grad_weight.dtype() == DType::BF16) {
    embedding_backward_sorted(grad_out, ids, vocab_start, grad_weight, stream);
    return;
  }
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
