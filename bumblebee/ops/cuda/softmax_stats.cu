// One-pass softmax statistics of the LM head's logits (tp = 1): the row max,
// the sum of exp(logit - row max) and the target logit in a single read of
// the bf16/fp32 logits [N, V].
//
// Each thread keeps a running (m, s): the max of the logits it has seen and
// their sum of exponentials relative to it, rescaled when a step raises the
// max. The threads of a row then merge as M = max_i m_i,
// S = sum_i s_i exp(m_i - M), in a fixed order, so the result is the same
// bits on every run. Rows up to kWarpRowVocab logits get a warp each (8 rows a
// block), longer rows a block of kThreads each. Statistics are fp32.
//
// Shaped to keep up with HBM (a bf16 logit is 2 bytes, so the arithmetic per
// logit must stay a handful of instructions):
// - a step folds kPacksPerStep 16-byte packs, whose loads are all issued
//   before any of their arithmetic: one max and one rescale a step, and
//   64 bytes a thread in flight;
// - a term is one fma and one MUFU.EX2, 2^(x log2(e) - m2) with
//   m2 = fl(m log2(e)). Rounding m2 scales the whole row's sum by one common
//   factor 2^(M log2(e) - M2), which the end takes out again from the
//   rounding error that fma gives exactly; the rescales, once a step, use
//   expf (see rescale), so neither leaves a bias in the sum.
// A row whose start is off the 16-byte grid (V not a multiple of the pack
// width) reads its first and last few elements one at a time.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/logits_checks.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRowVocab = 4096;
constexpr int kPacksPerStep = 4;

// 2^d (d <= 0) for rescaling a running sum to a raised max. ex2.approx runs a
// fraction of an ulp low on average for d just below 0, and a sum rescaled at
// every raised max and again at the merge would carry that bias each time;
// expf's range reduction leaves none, and it runs once a step, not a term.
__device__ __forceinline__ float rescale(float d) { return expf(kLn2 * d); }

// fl(m log2(e)). Every exponent below is taken relative to this rounded
// value, so it must not be fused into a neighbouring add or fma.
__device__ __forceinline__ float log2e_times(float m) { return __fmul_rn(m, kLog2e); }

struct RunningSoftmax {
  float m = -INFINITY;   // max of the values folded in
  float m2 = -INFINITY;  // fl(m log2(e))
  float s = 0.f;         // sum of 2^(x log2(e) - m2) over them

  template <int K>
  __device__ __forceinline__ void add(const float (&x)[K]) {
    float step_max = x[0];
#pragma unroll
    for (int i = 1; i < K; ++i) step_max = fmaxf(step_max, x[i]);
    const float new_m = fmaxf(m, step_max);
    if (new_m == -INFINITY) return;  // only -inf logits so far: nothing to sum, and -inf - -inf is NaN
    const float new_m2 = log2e_times(new_m);
    // One partial sum per 8 terms: short independent chains, summed in a fixed order.
    constexpr int kChains = K >= 8 ? K / 8 : 1;
    float part[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part[c] = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i) part[i * kChains / K] += exp2_ftz(fmaf(x[i], kLog2e, -new_m2));
    float acc = part[0];
#pragma unroll
    for (int c = 1; c < kChains; ++c) acc += part[c];
    s = fmaf(s, rescale(m2 - new_m2), acc);  // m2 = -inf (nothing yet) gives 0 * 0
    m = new_m;
    m2 = new_m2;
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
  // A step's packs lie `width` packs apart, so each load of a warp is one
  // contiguous 512 bytes.
  int64_t p = lane;
  for (; p + int64_t(kPacksPerStep - 1) * width < packs; p += int64_t(kPacksPerStep) * width) {
    Pack16<T> pk[kPacksPerStep];
#pragma unroll
    for (int k = 0; k < kPacksPerStep; ++k) pk[k] = load_pack(body + (p + int64_t(k) * width) * N);
    float x[kPacksPerStep * N];
#pragma unroll
    for (int k = 0; k < kPacksPerStep; ++k) unpack(pk[k], x + k * N);
    st.add(x);
  }
  for (; p < packs; p += width) {
    float x[N];
    unpack(load_pack(body + p * N), x);
    st.add(x);
  }
  for (int64_t c = head + packs * N + lane; c < v; c += width) {
    const float x[1] = {to_float(row[c])};
    st.add(x);
  }
}

// A thread's sum relative to the row's m2 (fl(M log2(e))). A thread that saw
// no finite logit has s = 0 and adds nothing (its m2 - row_m2 could be NaN
// when the row's is -inf too).
__device__ __forceinline__ float rescaled(const RunningSoftmax& st, float row_m2) {
  return st.s > 0.f ? st.s * rescale(st.m2 - row_m2) : 0.f;
}

// The row's sum of exp(x - M) from its sum of 2^(x log2(e) - M2): the factor
// 2^(M2 - M log2(e)) = 2^-err is common to the row, and err, below half an
// ulp of M2, is exact from fma. 2^-err = 1 + q with q = u + u^2 / 2,
// u = -err ln(2) (the next term is below fp32 resolution while |M| < 1e5), so
// the product is one fma with a single rounding.
__device__ __forceinline__ float sumexp_of(float sum2, float row_max) {
  if (!(sum2 > 0.f)) return sum2;
  const float u = -fmaf(row_max, kLog2e, -log2e_times(row_max)) * kLn2;
  return fmaf(sum2, fmaf(0.5f * u, u, u), sum2);
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
  const float s = block_sum(rescaled(st, log2e_times(m)), scratch);
  if (threadIdx.x == 0) {
    row_max[r] = m;
    sumexp[r] = sumexp_of(s, m);
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
  const float s = warp_sum(rescaled(st, log2e_times(m)));
  if (lane == 0) {
    row_max[r] = m;
    sumexp[r] = sumexp_of(s, m);
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
