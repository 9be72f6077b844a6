// Attention for the shapes the tiled kernels (flash, cuDNN) do not take: head
// dims that are not a multiple of 8 or pairs of q/k and v head dims beyond
// their tiles (up to 256 each), and tensors that do not start on a 16-byte
// boundary. Tiny test models have head
// dimensions like 6, 10 and 12, so this path is about correctness, not speed.
//
// Every kernel gives one warp one row of a head: lane l holds columns
// l, l + 32, ... in fp32 registers (C of them, covering the larger of the q/k
// and v head dims, which differ in multi-head latent attention), loads them
// as single bf16 elements (so only bf16's 2-byte alignment is needed), and a
// dot product with another row is a warp_sum, which leaves the same value in
// every lane. Nothing is quadratic in memory and there are no atomics:
//   forward: a warp per (query, head) walks the keys the query sees (with the
//            causal mask up to its bottom-right diagonal, else all) with an
//            online softmax (running max and sum, rescaling the output).
//   backward: dsum = rowsum(dO * O) first; then a warp per (query, head)
//            recomputes p = exp(scale q.k - lse) for each key to sum dQ, and
//            a warp per (key, kv head) walks every query head of its group
//            and every query that sees the key to sum dK and dV. Both read
//            K/V of kv head h / (Hq / Hkv), so grouped-query attention never
//            repeats K/V, and the sums run in a fixed order (deterministic).
#include <algorithm>
#include <type_traits>

#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda {
namespace {

constexpr int kWarps = 4;  // rows per block
constexpr int kThreads = kWarps * 32;

struct SmallParams {
  const bf16* q;  // [Tq, Hq, dqk]
  const bf16* k;  // [Tkv, Hkv, dqk]
  const bf16* v;  // [Tkv, Hkv, dv]
  const int* cu_seqlens_q;   // [S + 1]
  const int* cu_seqlens_kv;  // [S + 1]
  bool causal;  // query i of Lq sees keys j <= i + Lkv - Lq; else every key
  int heads_q, heads_kv, head_dim_qk, head_dim_v;
  float scale;
  // forward
  bf16* out;   // [Tq, Hq, dv]
  float* lse;  // [Tq, Hq]
  // backward
  const bf16* dout;      // [Tq, Hq, dv]
  const float* lse_in;   // [Tq, Hq]
  const float* dsum;     // [Tq, Hq]: rowsum(dout * out)
  bf16* dq;              // [Tq, Hq, dqk]
  bf16* dk;              // [Tkv, Hkv, dqk]
  bf16* dv;              // [Tkv, Hkv, dv]
};

// Sequence `seq`'s rows in q and in k/v.
struct SeqRange {
  int q_start, len_q, kv_start, len_kv;
  // The end of the keys query row `row` sees.
  __device__ int key_end(int row, bool causal) const {
    return causal ? max(0, min(len_kv, row + len_kv - len_q + 1)) : len_kv;
  }
  // The first query row that sees key `key`.
  __device__ int first_query(int key, bool causal) const { return causal ? max(0, key - (len_kv - len_q)) : 0; }
};

__device__ __forceinline__ SeqRange seq_range(const SmallParams& p, int seq) {
  const int q_start = p.cu_seqlens_q[seq], kv_start = p.cu_seqlens_kv[seq];
  return {q_start, p.cu_seqlens_q[seq + 1] - q_start, kv_start, p.cu_seqlens_kv[seq + 1] - kv_start};
}

// Element offsets of a head's row: q/k rows hold head_dim_qk values, v/out
// rows head_dim_v; `token` counts from the start of the tensor.
__device__ __forceinline__ int64_t q_offset(const SmallParams& p, int64_t token, int head) {
  return (token * p.heads_q + head) * p.head_dim_qk;
}
__device__ __forceinline__ int64_t o_offset(const SmallParams& p, int64_t token, int head) {
  return (token * p.heads_q + head) * p.head_dim_v;
}
__device__ __forceinline__ int64_t k_offset(const SmallParams& p, int64_t token, int kv_head) {
  return (token * p.heads_kv + kv_head) * p.head_dim_qk;
}
__device__ __forceinline__ int64_t v_offset(const SmallParams& p, int64_t token, int kv_head) {
  return (token * p.heads_kv + kv_head) * p.head_dim_v;
}

// This lane's columns of a row; columns past head_dim read as 0.
template <int C>
__device__ __forceinline__ void load_row(const bf16* row, int head_dim, int lane, float (&x)[C]) {
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int d = lane + 32 * c;
    x[c] = d < head_dim ? __bfloat162float(row[d]) : 0.f;
  }
}

template <int C>
__device__ __forceinline__ void store_row(bf16* row, int head_dim, int lane, const float (&x)[C], float factor) {
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int d = lane + 32 * c;
    if (d < head_dim) row[d] = __float2bfloat16_rn(x[c] * factor);
  }
}

// The full dot product of two rows held by the warp, in every lane.
template <int C>
__device__ __forceinline__ float warp_dot(const float (&a)[C], const float (&b)[C]) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) s = fmaf(a[c], b[c], s);
  return warp_sum(s);
}

// Warp per (query row of sequence blockIdx.z, head blockIdx.y).
template <int C>
__global__ void __launch_bounds__(kThreads) small_forward_kernel(const SmallParams p) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int head = blockIdx.y;
  const SeqRange sr = seq_range(p, blockIdx.z);
  if (row >= sr.len_q) return;  // the whole warp leaves together

  const int kv_head = head / (p.heads_q / p.heads_kv);
  const int64_t token = int64_t(sr.q_start) + row;
  const int key_end = sr.key_end(row, p.causal);

  float q[C], o[C];
  load_row(p.q + q_offset(p, token, head), p.head_dim_qk, lane, q);
#pragma unroll
  for (int c = 0; c < C; ++c) o[c] = 0.f;
  float row_max = -INFINITY, row_sum = 0.f;  // of the scaled scores, natural units

  for (int key = 0; key < key_end; ++key) {
    float kr[C], vr[C];
    load_row(p.k + k_offset(p, int64_t(sr.kv_start) + key, kv_head), p.head_dim_qk, lane, kr);
    load_row(p.v + v_offset(p, int64_t(sr.kv_start) + key, kv_head), p.head_dim_v, lane, vr);
    const float s = warp_dot(q, kr) * p.scale;
    const float m_new = fmaxf(row_max, s);
    // While every score so far is -inf, subtracting 0 keeps exp at 0, not NaN.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float correction = expf(row_max - m_use);
    const float prob = expf(s - m_use);
    row_sum = row_sum * correction + prob;
#pragma unroll
    for (int c = 0; c < C; ++c) o[c] = fmaf(prob, vr[c], o[c] * correction);
    row_max = m_new;
  }

  const float inv = row_sum > 0.f ? 1.f / row_sum : 0.f;
  store_row(p.out + o_offset(p, token, head), p.head_dim_v, lane, o, inv);
  if (lane == 0) p.lse[token * p.heads_q + head] = row_sum > 0.f ? row_max + logf(row_sum) : -INFINITY;
}

// dsum[r] = sum_d dout[r, d] * out[r, d] over the rows r of [T * Hq, dv]; a warp
// per row, grid-stride.
__global__ void small_dsum_kernel(const bf16* __restrict__ out, const bf16* __restrict__ dout, int64_t rows,
                                  int head_dim, float* __restrict__ dsum) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); r < rows; r += warps) {
    float acc = 0.f;
    for (int d = lane; d < head_dim; d += 32)
      acc = fmaf(__bfloat162float(out[r * head_dim + d]), __bfloat162float(dout[r * head_dim + d]), acc);
    acc = warp_sum(acc);
    if (lane == 0) dsum[r] = acc;
  }
}

// dQ: warp per (query row of sequence blockIdx.z, head blockIdx.y), over the
// keys the row sees (none when its lse is -inf).
template <int C>
__global__ void __launch_bounds__(kThreads) small_dq_kernel(const SmallParams p) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int head = blockIdx.y;
  const SeqRange sr = seq_range(p, blockIdx.z);
  if (row >= sr.len_q) return;

  const int kv_head = head / (p.heads_q / p.heads_kv);
  const int64_t token = int64_t(sr.q_start) + row;

  float q[C], dout[C], dq[C];
  load_row(p.q + q_offset(p, token, head), p.head_dim_qk, lane, q);
  load_row(p.dout + o_offset(p, token, head), p.head_dim_v, lane, dout);
#pragma unroll
  for (int c = 0; c < C; ++c) dq[c] = 0.f;
  const float lse = p.lse_in[token * p.heads_q + head];
  const float dsum = p.dsum[token * p.heads_q + head];
  const int key_end = lse == -INFINITY ? 0 : sr.key_end(row, p.causal);

  for (int key = 0; key < key_end; ++key) {
    float kr[C], vr[C];
    load_row(p.k + k_offset(p, int64_t(sr.kv_start) + key, kv_head), p.head_dim_qk, lane, kr);
    load_row(p.v + v_offset(p, int64_t(sr.kv_start) + key, kv_head), p.head_dim_v, lane, vr);
    const float prob = expf(warp_dot(q, kr) * p.scale - lse);
    const float ds = prob * (warp_dot(dout, vr) - dsum);
#pragma unroll
    for (int c = 0; c < C; ++c) dq[c] = fmaf(ds, kr[c], dq[c]);
  }
  store_row(p.dq + q_offset(p, token, head), p.head_dim_qk, lane, dq, p.scale);
}

// dK, dV: warp per (key row of sequence blockIdx.z, kv head blockIdx.y), over
// the group's query heads and the queries that see the key.
template <int C>
__global__ void __launch_bounds__(kThreads) small_dkdv_kernel(const SmallParams p) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int kv_head = blockIdx.y;
  const SeqRange sr = seq_range(p, blockIdx.z);
  if (row >= sr.len_kv) return;

  const int group = p.heads_q / p.heads_kv;
  const int64_t key_token = int64_t(sr.kv_start) + row;

  float kr[C], vr[C], dk[C], dv[C];
  load_row(p.k + k_offset(p, key_token, kv_head), p.head_dim_qk, lane, kr);
  load_row(p.v + v_offset(p, key_token, kv_head), p.head_dim_v, lane, vr);
#pragma unroll
  for (int c = 0; c < C; ++c) dk[c] = dv[c] = 0.f;

  for (int head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    for (int query = sr.first_query(row, p.causal); query < sr.len_q; ++query) {
      const int64_t token = int64_t(sr.q_start) + query;
      const float lse = p.lse_in[token * p.heads_q + head];
      if (lse == -INFINITY) continue;  // a row that sees no key (the whole warp skips it)
      float q[C], dout[C];
      load_row(p.q + q_offset(p, token, head), p.head_dim_qk, lane, q);
      load_row(p.dout + o_offset(p, token, head), p.head_dim_v, lane, dout);
      const float prob = expf(warp_dot(q, kr) * p.scale - lse);
      const float ds = prob * (warp_dot(dout, vr) - p.dsum[token * p.heads_q + head]);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        dv[c] = fmaf(prob, dout[c], dv[c]);
        dk[c] = fmaf(ds, q[c], dk[c]);
      }
    }
  }
  store_row(p.dk + k_offset(p, key_token, kv_head), p.head_dim_qk, lane, dk, p.scale);
  store_row(p.dv + v_offset(p, key_token, kv_head), p.head_dim_v, lane, dv, 1.f);
}

SmallParams params_of(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                      double scale) {
  SmallParams p{};
  p.q = static_cast<const bf16*>(q.raw());
  p.k = static_cast<const bf16*>(k.raw());
  p.v = static_cast<const bf16*>(v.raw());
  p.cu_seqlens_q = static_cast<const int*>(spans.cu_seqlens_q.raw());
  p.cu_seqlens_kv = static_cast<const int*>(spans.cu_seqlens_kv.raw());
  p.causal = spans.mask == ops::AttentionMask::Causal;
  p.heads_q = int(q.size(1));
  p.heads_kv = int(k.size(1));
  p.head_dim_qk = int(q.size(2));
  p.head_dim_v = int(v.size(2));
  p.scale = float(scale);
  return p;
}

// The columns a lane must hold: the wider of the two row kinds.
int widest_head_dim(const SmallParams& p) { return std::max(p.head_dim_qk, p.head_dim_v); }

static_assert(kSmallAttentionMaxHeadDim == 32 * 8, "8 columns per lane cover the largest head dimension");

// Calls f(std::integral_constant<int, C>) with C the columns per lane for head_dim.
template <typename F>
void dispatch_columns(int head_dim, F&& f) {
  if (head_dim <= 32) f(std::integral_constant<int, 1>{});
  else if (head_dim <= 64) f(std::integral_constant<int, 2>{});
  else if (head_dim <= 128) f(std::integral_constant<int, 4>{});
  else f(std::integral_constant<int, 8>{});
}

dim3 row_grid(int64_t max_seqlen, int heads, const Tensor& cu_seqlens) {
  return dim3(unsigned((max_seqlen + kWarps - 1) / kWarps), unsigned(heads), unsigned(cu_seqlens.numel() - 1));
}

}  // namespace

void small_head_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                                  double scale, Tensor& out, Tensor& lse) {
  SmallParams p = params_of(q, k, v, spans, scale);
  p.out = static_cast<bf16*>(out.raw());
  p.lse = static_cast<float*>(lse.raw());
  BB_CHECK(widest_head_dim(p) <= kSmallAttentionMaxHeadDim, "small_head_attention_forward: head dims qk ",
           p.head_dim_qk, " / v ", p.head_dim_v, " exceed ", kSmallAttentionMaxHeadDim);
  cudaStream_t stream = current_stream();
  const dim3 grid = row_grid(spans.max_seqlen_q, p.heads_q, spans.cu_seqlens_q);
  dispatch_columns(widest_head_dim(p), [&](auto columns) {
    small_forward_kernel<decltype(columns)::value><<<grid, kThreads, 0, stream>>>(p);
  });
  CUDA_CHECK_LAUNCH("small_head_attention_forward");
}

void small_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans,
                                   double scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  SmallParams p = params_of(q, k, v, spans, scale);
  BB_CHECK(widest_head_dim(p) <= kSmallAttentionMaxHeadDim, "small_head_attention_backward: head dims qk ",
           p.head_dim_qk, " / v ", p.head_dim_v, " exceed ", kSmallAttentionMaxHeadDim);
  const int64_t tokens = q.size(0);
  cudaStream_t stream = current_stream();

  // Tokens past the last sequence belong to no query or key: their gradients are zero.
  CUDA_CHECK(cudaMemsetAsync(dq.raw(), 0, dq.nbytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(dk.raw(), 0, dk.nbytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(dv.raw(), 0, dv.nbytes(), stream));

  Tensor dsum = Tensor::empty({tokens, int64_t(p.heads_q)}, DType::F32, q.device());
  const int64_t rows = tokens * p.heads_q;
  small_dsum_kernel<<<grid_for(rows, kWarps), kThreads, 0, stream>>>(
      static_cast<const bf16*>(out.raw()), static_cast<const bf16*>(dout.raw()), rows, p.head_dim_v,
      static_cast<float*>(dsum.raw()));
  CUDA_CHECK_LAUNCH("small_head_attention_backward (dsum)");

  p.dout = static_cast<const bf16*>(dout.raw());
  p.lse_in = static_cast<const float*>(lse.raw());
  p.dsum = static_cast<const float*>(dsum.raw());
  p.dq = static_cast<bf16*>(dq.raw());
  p.dk = static_cast<bf16*>(dk.raw());
  p.dv = static_cast<bf16*>(dv.raw());
  dispatch_columns(widest_head_dim(p), [&](auto columns) {
    constexpr int C = decltype(columns)::value;
    small_dq_kernel<C><<<row_grid(spans.max_seqlen_q, p.heads_q, spans.cu_seqlens_q), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH("small_head_attention_backward (dq)");
    small_dkdv_kernel<C><<<row_grid(spans.max_seqlen_kv, p.heads_kv, spans.cu_seqlens_kv), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH("small_head_attention_backward (dk, dv)");
  });
}

}  // namespace bb::cuda
