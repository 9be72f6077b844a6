// The host side of one tile configuration of the sm_90a flash attention
// backward, included by the translation unit that instantiates it
// (flash_backward_sm90_d64.cu, _d128.cu, _d192.cu: one configuration a unit,
// so nvcc compiles them side by side): the per-row statistics
// (flash_backward_sm90_rows.cuh), the TMA descriptors over the packed q, k, v
// and dout, the launch of flash_backward_sm90_kernel.cuh's kernel, and the
// conversion of its dQ sums to dq (flash_backward_sm90_rows.cuh). Compiled
// for sm_90a alone (wgmma, TMA, bulk copies and setmaxnreg need it). Its
// kernels and launch sit in an unnamed namespace: each unit keeps its own.
//
// One block per kBlockN keys (128; 96 at (192, 128)) of one kv head of one
// sequence, Hkv x S x ceil(max_seqlen_kv / kBlockN) in the order of
// flash_sm90_schedule.h; blocks past their sequence's end return at once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>

#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/error.h"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_configs.h"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_kernel.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_rows.cuh"

namespace bb::cuda {
namespace {

namespace fs = flash_sm90;
using cute::_1;

// dk (or dv) = the sum over the group's parts of dk_parts (dv_parts) in a
// fixed order, as bf16: one thread per four columns of one key row and kv
// head, rows past the last sequence untouched, as the unsplit kernel leaves
// them.
__global__ void sum_group_parts_kernel(const float* __restrict__ parts_in, int parts,
                                       const int* __restrict__ cu_seqlens_kv, int num_seqs, int64_t quads_per_row,
                                       int64_t part_quads, __nv_bfloat16* __restrict__ out) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (token, kv head, quad)
  if (index >= part_quads || index >= cu_seqlens_kv[num_seqs] * quads_per_row) return;
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int part = 0; part < parts; ++part) {
    const float4 x = reinterpret_cast<const float4*>(parts_in)[part * part_quads + index];
    sum.x += x.x;
    sum.y += x.y;
    sum.z += x.z;
    sum.w += x.w;
  }
  reinterpret_cast<uint2*>(out)[index] = make_uint2(flash::pack_bf16(sum.x, sum.y), flash::pack_bf16(sum.z, sum.w));
}

template <class T>
void launch(const BackwardArgs& a) {
  const Tensor &dout = a.dout, &q = a.q, &k = a.k, &v = a.v, &out = a.out, &lse = a.lse;
  const ops::AttentionSpans& spans = a.spans;
  const double scale = a.scale;
  Tensor &dq = a.dq, &dk = a.dk, &dv = a.dv;
  using Element = typename T::Element;
  constexpr int DQK = T::kHeadDimQk, DV = T::kHeadDimV;
  cudaStream_t stream = current_stream();
  typename T::Params p{};
  p.tokens_q = int(q.size(0));
  p.tokens_kv = int(k.size(0));
  p.heads_q = int(q.size(1));
  p.heads_kv = int(k.size(1));
  const int num_seqs = int(spans.cu_seqlens_q.numel() - 1);
  const int64_t rows_padded = fs::padded_rows<T::kBlockM>(p.tokens_q, num_seqs);
  BB_CHECK(rows_padded <= INT_MAX, "flash_sm90_backward: more than 2^31 padded query rows");
  p.rows_padded = int(rows_padded);
  const auto* cu_seqlens_q = static_cast<const int*>(spans.cu_seqlens_q.raw());

  Tensor lse_log2 = Tensor::empty({q.size(1), rows_padded}, DType::F32, q.device());
  Tensor dsum = Tensor::empty({q.size(1), rows_padded}, DType::F32, q.device());
  const int64_t tiles_per_head = rows_padded / T::kBlockM;
  fs::row_stats_kernel<T::kBlockM, DV><<<unsigned(tiles_per_head * p.heads_q), fs::kRowKernelThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(out.raw()), static_cast<const __nv_bfloat16*>(dout.raw()),
      static_cast<const float*>(lse.raw()), cu_seqlens_q, num_seqs, tiles_per_head, p.heads_q,
      static_cast<float*>(lse_log2.raw()), static_cast<float*>(dsum.raw()));
  CUDA_CHECK_LAUNCH("flash_sm90_backward (row stats)");
  Tensor dq_accum = Tensor::empty({q.size(1), rows_padded, DQK}, DType::F32, q.device());
  CUDA_CHECK(cudaMemsetAsync(dq_accum.raw(), 0, dq_accum.nbytes(), stream));

  // (tokens, head dim, heads), as the traits' GmemTensor.
  const auto gmem = [](const Tensor& t, int tokens, int heads, int dim) {
    return cute::make_tensor(cute::make_gmem_ptr(static_cast<const Element*>(t.raw())),
                             cute::make_shape(tokens, dim, heads),
                             cute::make_stride(int64_t(heads) * dim, _1{}, int64_t(dim)));
  };
  using BlockM = typename T::BlockM;
  using BlockN = typename T::BlockN;
  p.tma_q = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(q, p.tokens_q, p.heads_q, DQK),
                                cute::take<0, 2>(typename T::SmemLayoutQ{}), cute::Shape<BlockM, cute::Int<DQK>>{}, _1{});
  p.tma_do = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(dout, p.tokens_q, p.heads_q, DV),
                                 cute::take<0, 2>(typename T::SmemLayoutdO{}), cute::Shape<BlockM, cute::Int<DV>>{},
                                 _1{});
  p.tma_k = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(k, p.tokens_kv, p.heads_kv, DQK),
                                typename T::SmemLayoutK{}, cute::Shape<BlockN, cute::Int<DQK>>{}, _1{});
  p.tma_v = cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(v, p.tokens_kv, p.heads_kv, DV),
                                typename T::SmemLayoutV{}, cute::Shape<BlockN, cute::Int<DV>>{}, _1{});
  p.cu_seqlens_q = cu_seqlens_q;
  p.cu_seqlens_kv = static_cast<const int*>(spans.cu_seqlens_kv.raw());
  p.causal = spans.mask == ops::AttentionMask::Causal;
  p.scale = float(scale);
  p.scale_log2 = float(scale) * kLog2e;
  p.lse_log2 = static_cast<const float*>(lse_log2.raw());
  p.dsum = static_cast<const float*>(dsum.raw());
  p.dq_accum = static_cast<float*>(dq_accum.raw());
  p.dk = static_cast<Element*>(dk.raw());
  p.dv = static_cast<Element*>(dv.raw());
  p.group_parts = fs::group_parts_for(p.heads_q / p.heads_kv);
  Tensor dk_parts, dv_parts;
  if (p.group_parts > 1) {
    dk_parts = Tensor::empty({int64_t{p.group_parts}, k.size(0), k.size(1), DQK}, DType::F32, q.device());
    dv_parts = Tensor::empty({int64_t{p.group_parts}, v.size(0), v.size(1), DV}, DType::F32, q.device());
    p.dk_parts = static_cast<float*>(dk_parts.raw());
    p.dv_parts = static_cast<float*>(dv_parts.raw());
  }

  const int n_blocks = int((spans.max_seqlen_kv + T::kBlockN - 1) / T::kBlockN);
  if (num_seqs > 0 && n_blocks > 0) {
    const int units = p.heads_kv * num_seqs * p.group_parts;
    const int64_t blocks = int64_t(units) * n_blocks;
    BB_CHECK(blocks <= INT_MAX, "flash_sm90_backward: ", blocks, " blocks, more than a grid holds");
    // A unit's blocks share its part of the group's Q, dO, row statistics and dQ sums.
    const int64_t unit_bytes = int64_t(p.heads_q / p.heads_kv / p.group_parts) * spans.max_seqlen_q *
                               ((DQK + DV) * int64_t(sizeof(Element)) + DQK * int64_t(sizeof(float)) + 2 * sizeof(float));
    p.order = fs::block_order(units, n_blocks, unit_bytes, device_properties().multiProcessorCount,
                              fs::section_floor());
    const size_t smem = sizeof(typename T::SharedStorage);
    auto* kernel = fs::flash_backward_sm90_kernel<T>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<unsigned(blocks), T::kThreads, smem, stream>>>(p);
    CUDA_CHECK_LAUNCH("flash_sm90_backward");
  }
  if (p.group_parts > 1) {
    const auto sum_parts = [&](const float* parts, int dim, Tensor& grad) {
      const int64_t part_quads = grad.numel() / 4;
      constexpr int kSumThreads = 256;
      sum_group_parts_kernel<<<unsigned((part_quads + kSumThreads - 1) / kSumThreads), kSumThreads, 0, stream>>>(
          parts, p.group_parts, p.cu_seqlens_kv, num_seqs, int64_t(p.heads_kv) * dim / 4, part_quads,
          static_cast<__nv_bfloat16*>(grad.raw()));
      CUDA_CHECK_LAUNCH("flash_sm90_backward (group parts)");
    };
    sum_parts(p.dk_parts, DQK, dk);
    sum_parts(p.dv_parts, DV, dv);
  }

  fs::dq_convert_kernel<T><<<unsigned(tiles_per_head * p.heads_q * T::kConsumers), fs::kRowKernelThreads, 0, stream>>>(
      static_cast<const float*>(dq_accum.raw()), cu_seqlens_q, num_seqs, q.size(0), p.heads_q, tiles_per_head,
      float(scale), static_cast<__nv_bfloat16*>(dq.raw()));
  CUDA_CHECK_LAUNCH("flash_sm90_backward (dq)");
}

}  // namespace
}  // namespace bb::cuda
