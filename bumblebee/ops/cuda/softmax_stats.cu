// One-pass softmax statistics of the LM head's logits (tp = 1): the row max,
// the sum of exp(logit - row max) and the target logit in a single read of
// the bf16/fp32 logits [N, V].
//
// Each thread keeps a running (m, s): the max of the logits it has seen and
// the sum of exp(x - m) over them, rescaled by exp(m_old - m_new) when a pack
// raises the max (one exp per 16-byte pack, not per element). The threads of
// a row then merge as M = max_i m_i, S = sum_i s_i exp(m_i - M). Loads are
// 16-byte packs; a row whose start is off the 16-byte grid (V not a multiple
// of the pack width) reads its first and last few elements one at a time.
// Rows up to kWarpRowVocab logits get a warp each (8 rows a block), longer
// rows a block of kThreads each. Statistics are fp32.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/logits_checks.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRowVocab = 4096;

struct RunningSoftmax {
  float m = -INFINITY;  // max of the values folded in
  float s = 0.f;        // sum of exp(x - m) over them

  template <int K>
  __device__ __forceinline__ void add(const float (&x)[K]) {
    float pack_max = x[0];
#pragma unroll
    for (int i = 1; i < K; ++i) pack_max = fmaxf(pack_max, x[i]);
    const float new_m = fmaxf(m, pack_max);
    if (new_m == -INFINITY) return;  // only -inf logits so far: nothing to sum, and exp(-inf - -inf) is NaN
    float acc = s * expf(m - new_m);  // m = -inf (nothing yet) gives 0 * 0
#pragma unroll
    for (int i = 0; i < K; ++i) acc += expf(x[i] - new_m);
    m = new_m;
    s = acc;
  }
};

// Folds the `lane`-th of every `width` elements of one row into `st`.
template <typename T>
__device__ __forceinline__ void fold_row(const T* row, int64_t v, int lane, int width, RunningSoftmax& st) {
  constexpr int N = Pack16<T>::N;
  const int64_t head =
      min(v, int64_t(((16 - (reinterpret_cast<uintptr_t>(row) & 15)) & 15) / sizeof(T)));
  const int64_t packs = (v - head) / N;
  for (int64_t c = lane; c < head; c += width) {
    const float x[1] = {to_float(row[c])};
    st.add(x);
  }
  const T* body = row + head;
#pragma unroll 4
  for (int64_t p = lane; p < packs; p += width) {
    const Pack16<T> pk = load_pack(body + p * N);
    float x[N];
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = to_float(pk.v[i]);
    st.add(x);
  }
  for (int64_t c = head + packs * N + lane; c < v; c += width) {
    const float x[1] = {to_float(row[c])};
    st.add(x);
  }
}

// A thread that saw no finite logit has s = 0 and adds nothing (its
// exp(m_i - M) could be NaN when M is -inf too).
__device__ __forceinline__ float rescaled(const RunningSoftmax& st, float row_max) {
  return st.s > 0.f ? st.s * expf(st.m - row_max) : 0.f;
}

// Zero when the label belongs to another rank's columns or is masked, as in
// logits_sumexp_target.
template <typename T, typename I>
__device__ __forceinline__ float target_of(const T* row, int64_t v, I label, int64_t vocab_start) {
  const int64_t local = int64_t(label) - vocab_start;
  return (local >= 0 && local < v) ? to_float(row[local]) : 0.f;
}

template <typename T, typename I>
__global__ void softmax_stats_block_kernel(const T* __restrict__ logits, const I* __restrict__ labels,
                                           int64_t vocab_start, int64_t v, float* __restrict__ row_max,
                                           float* __restrict__ sumexp, float* __restrict__ target_logit) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * v;
  RunningSoftmax st;
  fold_row(row, v, int(threadIdx.x), int(blockDim.x), st);
  const float m = block_max(st.m, scratch);
  const float s = block_sum(rescaled(st, m), scratch);
  if (threadIdx.x == 0) {
    row_max[r] = m;
    sumexp[r] = s;
    target_logit[r] = target_of(row, v, labels[r], vocab_start);
  }
}

template <typename T, typename I>
__global__ void softmax_stats_warp_kernel(const T* __restrict__ logits, const I* __restrict__ labels,
                                          int64_t vocab_start, int64_t rows, int64_t v, float* __restrict__ row_max,
                                          float* __restrict__ sumexp, float* __restrict__ target_logit) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;  // a whole warp leaves, so the shuffles below stay full-warp
  const T* row = logits + r * v;
  RunningSoftmax st;
  fold_row(row, v, lane, 32, st);
  const float m = warp_max(st.m);
  const float s = warp_sum(rescaled(st, m));
  if (lane == 0) {
    row_max[r] = m;
    sumexp[r] = s;
    target_logit[r] = target_of(row, v, labels[r], vocab_start);
  }
}

}  // namespace

void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit) {
  const char* op = "logits_softmax_stats";
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
      const I* lab = static_cast<const I*>(labels.raw());
      float* m = static_cast<float*>(row_max.raw());
      float* s = static_cast<float*>(sumexp.raw());
      float* t = static_cast<float*>(target_logit.raw());
      if (v <= kWarpRowVocab) {
        const int64_t rows_per_block = kThreads / 32;
        const unsigned blocks = unsigned((rows + rows_per_block - 1) / rows_per_block);
        softmax_stats_warp_kernel<T, I><<<blocks, kThreads, 0, stream>>>(p, lab, vocab_start, rows, v, m, s, t);
      } else {
        softmax_stats_block_kernel<T, I><<<unsigned(rows), kThreads, 0, stream>>>(p, lab, vocab_start, v, m, s, t);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
