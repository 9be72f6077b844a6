// Vocab-parallel cross entropy in pieces: row max, sum of exp and target
// logit, the loss from the (group-reduced) statistics, and the fused
// softmax-minus-onehot backward.
//
// The logits stay in their storage dtype (bfloat16) and are read row by row;
// only [N]-sized fp32 statistics are written, so no fp32 copy of the
// [N, V] logits ever exists. Between the pieces the caller all-reduces the
// statistics over the tensor-parallel group (max, then sums).
//
// The backward reads and writes every logit once, so it is shaped to keep up
// with HBM. A block takes one short tile of a row (kThreads threads,
// kPacksPerThread 16-byte packs each, all loaded before any is computed and
// stored): the row's label, lse and dloss are read once a block, columns need
// no division, and on an H200 such short-lived blocks move data about as fast
// as a device-to-device cudaMemcpy, where blocks that loop over a whole row,
// or over the whole tensor, lose about 7%. p = exp(x - lse) is one fma and one
// MUFU.EX2, and the one-hot is a branch per pack rather than a compare per
// element.
#include <algorithm>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/logits_checks.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPacksPerThread = 2;
constexpr int64_t kMaxGridY = 65535;

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

// Stores the floats as one 16-byte pack of T (bf16 rounds a pair at a time).
// __stwb is a plain store that stays one 16-byte access, where NVVM may split
// an assigned uint4 into four.
template <typename T>
__device__ __forceinline__ void store_floats(T* p, const float (&x)[Pack16<T>::N]) {
  uint32_t w[4];
  if constexpr (std::is_same_v<T, bf16>) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(x[2 * j], x[2 * j + 1]);
      w[j] = *reinterpret_cast<const uint32_t*>(&b);
    }
  } else {
    static_assert(std::is_same_v<T, float>, "the backward takes bf16 or fp32 logits");
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = __float_as_uint(x[j]);
  }
  __stwb(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
}

// One row's d loss / d logits, (softmax - onehot(target)) * dloss, with
// exp(x - lse) = 2^(x log2(e) - lse2) * 2^-err: lse2 = fl(lse log2(e)) and
// err = lse log2(e) - lse2, exact from fma and below half an ulp of lse2.
// 2^-err, common to the row, goes into the factor on p (as in
// softmax_stats.cu: 1 + u + u^2 / 2 with u = -err ln(2)), so fp32 gradients
// carry no bias of the order of |lse| 2^-24 either.
struct SoftmaxGrad {
  int64_t target;  // the label's column in this shard (outside [0, v) if not here or masked)
  float lse2;
  float dp;  // dloss * 2^-err, the factor on p
  float d;   // dloss, the factor on the one-hot

  __device__ __forceinline__ SoftmaxGrad(int64_t target_col, float row_lse, float dloss)
      : target(target_col), d(dloss) {
    lse2 = __fmul_rn(row_lse, kLog2e);  // rounded on its own: err must be its exact rounding error
    const float u = -fmaf(row_lse, kLog2e, -lse2) * kLn2;
    dp = d * fmaf(0.5f * u, u, u + 1.f);
  }

  // p * dloss before the one-hot.
  __device__ __forceinline__ float p_times_d(float x) const { return exp2_ftz(fmaf(x, kLog2e, -lse2)) * dp; }

  // Writes to `out` the gradient of the pack `in` of columns [c, c + N).
  template <typename T>
  __device__ __forceinline__ void pack(const Pack16<T>& in, int64_t c, T* out) const {
    constexpr int N = Pack16<T>::N;
    float x[N];
    unpack(in, x);
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = p_times_d(x[i]);
    const int64_t hit = target - c;
    if (uint64_t(hit) < uint64_t(N)) {  // the pack holds the target column
#pragma unroll
      for (int i = 0; i < N; ++i) x[i] -= i == int(hit) ? d : 0.f;
    }
    store_floats(out, x);
  }
};

// A block a tile of one row: blockIdx.y the row (within the launch), blockIdx.x
// a run of kThreads * kPacksPerThread units (16-byte packs when VEC, else
// single elements), each thread taking every kThreads-th, so a warp's access
// is contiguous. VEC needs v a multiple of the pack width and both rows
// 16-byte aligned. dlogits may alias logits: each element is read, then
// written, by one thread, and a thread's loads come before its stores.
template <typename T, typename I, bool VEC>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(const T* logits, const I* __restrict__ labels, int64_t vocab_start,
                                  const float* __restrict__ lse, const float* __restrict__ dloss, int64_t v,
                                  T* dlogits) {
  const int64_t r = blockIdx.y;
  const T* in = logits + r * v;
  T* out = dlogits + r * v;
  const SoftmaxGrad g(int64_t(labels[r]) - vocab_start, lse[r], dloss[r]);
  const int64_t first = int64_t(blockIdx.x) * kThreads * kPacksPerThread + threadIdx.x;
  if constexpr (VEC) {
    constexpr int N = Pack16<T>::N;
    const int64_t packs = v / N;
    Pack16<T> pk[kPacksPerThread];
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t u = first + k * kThreads;
      if (u < packs) pk[k] = load_pack(in + u * N);
    }
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t u = first + k * kThreads;
      if (u < packs) g.pack(pk[k], u * N, out + u * N);
    }
  } else {
    float x[kPacksPerThread];
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t c = first + k * kThreads;
      if (c < v) x[k] = to_float(in[c]);
    }
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t c = first + k * kThreads;
      if (c < v) out[c] = from_float<T>(g.p_times_d(x[k]) - (c == g.target ? g.d : 0.f));
    }
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
      const bool vec = v % Pack16<T>::N == 0 && aligned16(p) && aligned16(out);
      const int64_t units = vec ? v / Pack16<T>::N : v;
      const unsigned tiles = unsigned((units + kThreads * kPacksPerThread - 1) / (kThreads * kPacksPerThread));
      // Rows go in gridDim.y, which holds at most 65535: longer batches take several launches.
      for (int64_t r0 = 0; r0 < rows; r0 += kMaxGridY) {
        const dim3 grid(tiles, unsigned(std::min(kMaxGridY, rows - r0)));
        const T* in = p + r0 * v;
        T* o = out + r0 * v;
        if (vec) {
          cross_entropy_backward_kernel<T, I, true>
              <<<grid, kThreads, 0, stream>>>(in, lab + r0, vocab_start, l + r0, d + r0, v, o);
        } else {
          cross_entropy_backward_kernel<T, I, false>
              <<<grid, kThreads, 0, stream>>>(in, lab + r0, vocab_start, l + r0, d + r0, v, o);
        }
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
