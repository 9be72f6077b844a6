// Host side of the sm_90a flash attention backward (flash_backward_sm90.h):
// the per-row statistics kernel, the TMA descriptors over the packed q, k, v
// and dout, and the launch of flash_backward_sm90_kernel.cuh's kernel.
// Compiled for sm_90a alone (wgmma, TMA and setmaxnreg need it).
//
// One block per 128 keys of one kv head of one sequence: the grid is
// (ceil(max_seqlen_kv / 128), Hkv, S), and blocks past their sequence's end
// return at once.
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/error.h"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_kernel.cuh"

namespace bb::cuda {
namespace {

namespace fs = flash_sm90;
using cute::_1;

// Per query row and head, transposed to [heads, tokens] so a step's 64 rows
// of one head are contiguous: dsum = rowsum(dout * out), the softmax
// backward's correction term, and lse in log2 units with the -inf of rows
// that saw no key turned to +inf (exp2(s - lse) is then 0 for every key,
// where -inf would give NaN for masked scores). One warp per row.
__global__ void row_stats_kernel(const __nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ dout,
                                 const float* __restrict__ lse, int64_t tokens, int heads, int head_dim,
                                 float* __restrict__ lse_log2, float* __restrict__ dsum) {
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);  // token * heads + head
  if (row >= tokens * heads) return;
  const auto* o = reinterpret_cast<const __nv_bfloat162*>(out + row * head_dim);
  const auto* d = reinterpret_cast<const __nv_bfloat162*>(dout + row * head_dim);
  float acc = 0.f;
  for (int c = lane; c < head_dim / 2; c += 32) {
    const float2 a = __bfloat1622float2(o[c]), b = __bfloat1622float2(d[c]);
    acc += a.x * b.x + a.y * b.y;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) {
    const int64_t token = row / heads, head = row % heads;
    const float l = lse[row];
    dsum[head * tokens + token] = acc;
    lse_log2[head * tokens + token] = l == -INFINITY ? INFINITY : l * kLog2e;
  }
}

template <int D>
void launch(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
            const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq_accum, Tensor& dk,
            Tensor& dv) {
  using T = fs::BackwardTraits<D>;
  using Element = typename T::Element;
  cudaStream_t stream = current_stream();
  typename T::Params p{};
  p.tokens_q = int(q.size(0));
  p.tokens_kv = int(k.size(0));
  p.heads_q = int(q.size(1));
  p.heads_kv = int(k.size(1));

  Tensor lse_log2 = Tensor::empty({q.size(1), q.size(0)}, DType::F32, q.device());
  Tensor dsum = Tensor::empty({q.size(1), q.size(0)}, DType::F32, q.device());
  const int64_t rows = q.size(0) * q.size(1);
  constexpr int kRowsPerBlock = 8;
  row_stats_kernel<<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(out.raw()), static_cast<const __nv_bfloat16*>(dout.raw()),
      static_cast<const float*>(lse.raw()), q.size(0), p.heads_q, D, static_cast<float*>(lse_log2.raw()),
      static_cast<float*>(dsum.raw()));
  CUDA_CHECK_LAUNCH("flash_sm90_backward (row stats)");

  // (tokens, head dim, heads), as the traits' GmemTensor.
  const auto gmem = [](const Tensor& t, int tokens, int heads) {
    return cute::make_tensor(cute::make_gmem_ptr(static_cast<const Element*>(t.raw())),
                             cute::make_shape(tokens, D, heads),
                             cute::make_stride(int64_t(heads) * D, _1{}, int64_t(D)));
  };
  p.tma_q = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(q, p.tokens_q, p.heads_q),
                                cute::take<0, 2>(typename T::SmemLayoutQ{}),
                                cute::Shape<typename T::BlockM, typename T::HeadDim>{}, _1{});
  p.tma_do = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(dout, p.tokens_q, p.heads_q),
                                 cute::take<0, 2>(typename T::SmemLayoutQ{}),
                                 cute::Shape<typename T::BlockM, typename T::HeadDim>{}, _1{});
  p.tma_k = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(k, p.tokens_kv, p.heads_kv), typename T::SmemLayoutK{},
                                cute::Shape<typename T::BlockN, typename T::HeadDim>{}, _1{});
  p.tma_v = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(v, p.tokens_kv, p.heads_kv), typename T::SmemLayoutV{},
                                cute::Shape<typename T::BlockN, typename T::HeadDim>{}, _1{});
  p.cu_seqlens_q = static_cast<const int*>(spans.cu_seqlens_q.raw());
  p.cu_seqlens_kv = static_cast<const int*>(spans.cu_seqlens_kv.raw());
  p.causal = spans.mask == ops::AttentionMask::Causal;
  p.scale = float(scale);
  p.scale_log2 = float(scale) * kLog2e;
  p.lse_log2 = static_cast<const float*>(lse_log2.raw());
  p.dsum = static_cast<const float*>(dsum.raw());
  p.dq_accum = static_cast<float*>(dq_accum.raw());
  p.dk = static_cast<Element*>(dk.raw());
  p.dv = static_cast<Element*>(dv.raw());

  const int num_seqs = int(spans.cu_seqlens_q.numel() - 1);
  const int n_blocks = int((spans.max_seqlen_kv + T::kBlockN - 1) / T::kBlockN);
  if (num_seqs == 0 || n_blocks == 0) return;
  const size_t smem = sizeof(typename T::SharedStorage);
  auto* kernel = fs::flash_backward_sm90_kernel<T>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  dim3 grid(unsigned(n_blocks), unsigned(p.heads_kv), unsigned(num_seqs));
  kernel<<<grid, T::kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH("flash_sm90_backward");
}

}  // namespace

bool flash_sm90_backward_takes(int64_t head_dim_qk, int64_t head_dim_v) {
  return (head_dim_qk == 64 && head_dim_v == 64) || (head_dim_qk == 128 && head_dim_v == 128);
}

void flash_sm90_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq_accum,
                         Tensor& dk, Tensor& dv) {
  const int64_t dqk = q.size(2), dv_dim = v.size(2);
  BB_CHECK(flash_sm90_backward_takes(dqk, dv_dim), "flash_sm90_backward: no tiles for head dims q/k ", dqk,
           " and v ", dv_dim);
  // TMA coordinates are 32-bit.
  BB_CHECK(q.size(0) <= INT_MAX && k.size(0) <= INT_MAX, "flash_sm90_backward: more than 2^31 tokens");
  if (dqk == 64) launch<64>(dout, q, k, v, out, lse, spans, scale, dq_accum, dk, dv);
  else launch<128>(dout, q, k, v, out, lse, spans, scale, dq_accum, dk, dv);
}

}  // namespace bb::cuda
