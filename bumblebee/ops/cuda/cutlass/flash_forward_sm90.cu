// Host side of the sm_90a flash attention forward (flash_forward_sm90.h): the
// TMA descriptors over the packed q, k and v, and the launch of
// flash_forward_sm90_kernel.cuh's kernel. Compiled for sm_90a alone (wgmma,
// TMA and setmaxnreg need it).
//
// One block per kBlockM query rows (128; 192 at head dim 64) of one head of
// one sequence, Hq x S x ceil(max_seqlen_q / kBlockM) in the order of
// flash_sm90_schedule.h; blocks past their sequence's end return at once.
// Only the head dims the model zoo needs are instantiated (each costs a
// minute of nvcc on CI's two cores).
#include "bumblebee/ops/cuda/cutlass/flash_forward_sm90.h"

#include <cuda_runtime.h>

#include <climits>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/error.h"
#include "bumblebee/ops/cuda/cutlass/flash_forward_sm90_kernel.cuh"

namespace bb::cuda {
namespace {

// cute's names stay qualified here: bb has a Shape and a Tensor of its own.
namespace fs = flash_sm90;
using cute::_1;

template <int DQK, int DV>
void launch(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans, double scale,
            Tensor& out, Tensor& lse) {
  using T = fs::ForwardTraits<DQK, DV>;
  using Element = typename T::Element;
  typename T::Params p{};
  p.tokens_q = int(q.size(0));
  p.tokens_kv = int(k.size(0));
  p.heads_q = int(q.size(1));
  p.heads_kv = int(k.size(1));
  const auto gmem = [](const Tensor& t) { return cute::make_gmem_ptr(static_cast<const Element*>(t.raw())); };
  auto mQ = cute::make_tensor(gmem(q), cute::make_shape(p.tokens_q, DQK, p.heads_q),
                          cute::make_stride(int64_t(p.heads_q) * DQK, _1{}, int64_t(DQK)));
  auto mK = cute::make_tensor(gmem(k), cute::make_shape(p.tokens_kv, DQK, p.heads_kv),
                          cute::make_stride(int64_t(p.heads_kv) * DQK, _1{}, int64_t(DQK)));
  auto mVt = cute::make_tensor(gmem(v), cute::make_shape(DV, p.tokens_kv, p.heads_kv),
                           cute::make_stride(_1{}, int64_t(p.heads_kv) * DV, int64_t(DV)));
  p.tma_q = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, mQ, typename T::SmemLayoutQ{},
                          cute::Shape<typename T::BlockM, typename T::HeadQk>{}, _1{});
  p.tma_k = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, mK, cute::take<0, 2>(typename T::SmemLayoutK{}),
                          cute::Shape<typename T::BlockN, typename T::HeadQk>{}, _1{});
  p.tma_v = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, mVt, cute::take<0, 2>(typename T::SmemLayoutVt{}),
                          cute::Shape<typename T::HeadV, typename T::BlockN>{}, _1{});
  p.cu_seqlens_q = static_cast<const int*>(spans.cu_seqlens_q.raw());
  p.cu_seqlens_kv = static_cast<const int*>(spans.cu_seqlens_kv.raw());
  p.causal = spans.mask == ops::AttentionMask::Causal;
  p.scale_log2 = float(scale) * kLog2e;
  p.out = static_cast<Element*>(out.raw());
  p.lse = static_cast<float*>(lse.raw());

  const int num_seqs = int(spans.cu_seqlens_q.numel() - 1);
  const int m_blocks = int((spans.max_seqlen_q + T::kBlockM - 1) / T::kBlockM);
  if (num_seqs == 0 || m_blocks == 0) return;
  const int64_t blocks = int64_t(p.heads_q) * num_seqs * m_blocks;
  BB_CHECK(blocks <= INT_MAX, "flash_sm90_forward: ", blocks, " blocks, more than a grid holds");
  // A unit's blocks share its kv head's K and V with the group's other query heads.
  const int64_t unit_bytes =
      spans.max_seqlen_kv * (DQK + DV) * int64_t(sizeof(Element)) / (p.heads_q / p.heads_kv);
  p.order = fs::block_order(p.heads_q * num_seqs, m_blocks, unit_bytes, device_properties().multiProcessorCount,
                            fs::section_floor());
  const size_t smem = sizeof(typename T::SharedStorage);
  auto* kernel = fs::flash_forward_sm90_kernel<T>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<unsigned(blocks), T::kThreads, smem, current_stream()>>>(p);
  CUDA_CHECK_LAUNCH("flash_sm90_forward");
}

}  // namespace

bool flash_sm90_forward_takes(int64_t head_dim_qk, int64_t head_dim_v) {
  return (head_dim_qk == 64 && head_dim_v == 64) || (head_dim_qk == 128 && head_dim_v == 128) ||
         (head_dim_qk == 192 && head_dim_v == 128);
}

void flash_sm90_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionSpans& spans,
                        double scale, Tensor& out, Tensor& lse) {
  const int64_t dqk = q.size(2), dv = v.size(2);
  BB_CHECK(flash_sm90_forward_takes(dqk, dv), "flash_sm90_forward: no tiles for head dims q/k ", dqk, " and v ", dv);
  // TMA coordinates are 32-bit.
  BB_CHECK(q.size(0) <= INT_MAX && k.size(0) <= INT_MAX, "flash_sm90_forward: more than 2^31 tokens");
  if (dqk == 64) launch<64, 64>(q, k, v, spans, scale, out, lse);
  else if (dqk == 128) launch<128, 128>(q, k, v, spans, scale, out, lse);
  else launch<192, 128>(q, k, v, spans, scale, out, lse);
}

}  // namespace bb::cuda
