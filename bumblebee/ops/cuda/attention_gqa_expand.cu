// The two copies of the grouped-query attention backward by expansion
// (attention.cpp, BB_ATTENTION_GQA_EXPAND): K and V repeated from Hkv to Hq
// heads so that the tiled backends run the backward as multi-head attention,
// and the per-query-head dK / dV they give summed back over each group.
//
// Both kernels move 8 bfloat16s (16 bytes) per thread: the tiled backends
// that take the expansion need head dims that are multiples of 8 and tensors
// on the 16-byte grid, so every row of every head starts on it too.
#include <cuda_bf16.h>

#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // bfloat16s per 16-byte vector

// expanded[t, h, :] = kv[t, h / group, :]; `chunks` = D / 8 vectors per head row.
__global__ void repeat_kv_heads_kernel(const uint4* __restrict__ kv, int64_t tokens, int heads_kv, int group,
                                       int chunks, uint4* __restrict__ expanded) {
  const int heads_q = heads_kv * group;
  const int64_t total = tokens * heads_q * chunks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % chunks);
    const int h = int((i / chunks) % heads_q);
    const int64_t t = i / (int64_t(chunks) * heads_q);
    expanded[i] = kv[(t * heads_kv + h / group) * chunks + c];
  }
}

// grad[t, h, :] = sum over j < group of expanded[t, h * group + j, :], in fp32
// and in that order (deterministic), rounded once to bf16; tokens at or past
// cu_seqlens_kv[num_seqs] belong to no sequence and get 0 (the backends leave
// those rows of the expanded gradients unwritten).
__global__ void sum_kv_head_groups_kernel(const uint4* __restrict__ expanded, const int32_t* __restrict__ cu_seqlens_kv,
                                          int num_seqs, int64_t tokens, int heads_kv, int group, int chunks,
                                          uint4* __restrict__ grad) {
  const int64_t valid_tokens = cu_seqlens_kv[num_seqs];
  const int64_t total = tokens * heads_kv * chunks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % chunks);
    const int h = int((i / chunks) % heads_kv);
    const int64_t t = i / (int64_t(chunks) * heads_kv);
    float acc[kVec] = {};
    if (t < valid_tokens) {
      const uint4* src = expanded + (t * heads_kv * group + int64_t(h) * group) * chunks + c;
      for (int j = 0; j < group; ++j) {
        const uint4 raw = src[int64_t(j) * chunks];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int p = 0; p < kVec / 2; ++p) {
          const float2 f = __bfloat1622float2(pairs[p]);
          acc[2 * p] += f.x;
          acc[2 * p + 1] += f.y;
        }
      }
    }
    uint4 out;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int p = 0; p < kVec / 2; ++p) pairs[p] = __floats2bfloat162_rn(acc[2 * p], acc[2 * p + 1]);
    grad[i] = out;
  }
}

void check_expansion(const Tensor& per_kv_head, const Tensor& per_q_head, const char* op) {
  BB_CHECK(per_kv_head.dtype() == DType::BF16 && per_q_head.dtype() == DType::BF16, op, ": tensors must be bfloat16");
  BB_CHECK(per_kv_head.dim() == 3 && per_q_head.dim() == 3 && per_kv_head.size(0) == per_q_head.size(0) &&
               per_kv_head.size(2) == per_q_head.size(2),
           op, ": ", shape_str(per_kv_head.shape()), " and ", shape_str(per_q_head.shape()),
           " are not [T, Hkv, D] and [T, Hq, D]");
  BB_CHECK(per_kv_head.size(1) > 0 && per_q_head.size(1) % per_kv_head.size(1) == 0, op, ": ", per_q_head.size(1),
           " query heads are not a multiple of ", per_kv_head.size(1), " kv heads");
  BB_CHECK(per_kv_head.size(2) % kVec == 0, op, ": head dim ", per_kv_head.size(2), " is not a multiple of ", kVec);
  for (const Tensor* t : {&per_kv_head, &per_q_head})
    BB_CHECK((reinterpret_cast<uintptr_t>(t->raw()) & 15u) == 0, op, ": tensors must start on a 16-byte boundary");
}

}  // namespace

void repeat_kv_heads(const Tensor& kv, Tensor& expanded) {
  check_expansion(kv, expanded, "repeat_kv_heads");
  const int64_t tokens = kv.size(0);
  const int heads_kv = int(kv.size(1)), group = int(expanded.size(1) / kv.size(1)), chunks = int(kv.size(2) / kVec);
  const int64_t total = tokens * heads_kv * group * chunks;
  if (total == 0) return;
  repeat_kv_heads_kernel<<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<const uint4*>(kv.raw()), tokens, heads_kv, group, chunks, static_cast<uint4*>(expanded.raw()));
  CUDA_CHECK_LAUNCH("repeat_kv_heads");
}

void sum_kv_head_groups(const Tensor& expanded, const Tensor& cu_seqlens_kv, Tensor& grad) {
  check_expansion(grad, expanded, "sum_kv_head_groups");
  const int64_t tokens = grad.size(0);
  const int heads_kv = int(grad.size(1)), group = int(expanded.size(1) / grad.size(1));
  const int chunks = int(grad.size(2) / kVec);
  const int64_t total = tokens * heads_kv * chunks;
  if (total == 0) return;
  sum_kv_head_groups_kernel<<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<const uint4*>(expanded.raw()), static_cast<const int32_t*>(cu_seqlens_kv.raw()),
      int(cu_seqlens_kv.numel() - 1), tokens, heads_kv, group, chunks, static_cast<uint4*>(grad.raw()));
  CUDA_CHECK_LAUNCH("sum_kv_head_groups");
}

}  // namespace bb::cuda
