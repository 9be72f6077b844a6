// Sequence lengths, ragged offsets and padded softmax stats for cuDNN's
// ragged attention (see cudnn_varlen.h).
#ifdef BB_WITH_CUDNN

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cudnn_varlen.h"

namespace bb::cuda {
namespace {

__global__ void varlen_metadata_kernel(const int32_t* __restrict__ cu_q, const int32_t* __restrict__ cu_kv,
                                       int num_seqs, RaggedStrides strides, int32_t* __restrict__ seq_lens_q,
                                       int32_t* __restrict__ seq_lens_kv, RaggedOffsets offsets) {
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b <= num_seqs; b += gridDim.x * blockDim.x) {
    if (b < num_seqs) {
      seq_lens_q[b] = cu_q[b + 1] - cu_q[b];
      seq_lens_kv[b] = cu_kv[b + 1] - cu_kv[b];
    }
    const int64_t q = cu_q[b], kv = cu_kv[b];
    offsets.q[b] = q * strides.q;
    offsets.k[b] = kv * strides.k;
    offsets.v[b] = kv * strides.v;
    offsets.o[b] = q * strides.o;
    offsets.stats[b] = q * strides.stats;
  }
}

__global__ void padded_stats_kernel(const float* __restrict__ lse, const int32_t* __restrict__ cu, int num_seqs,
                                    int heads, int max_seqlen, float* __restrict__ stats) {
  const int64_t total = int64_t(num_seqs) * heads * max_seqlen;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int s = int(i % max_seqlen);
    const int h = int((i / max_seqlen) % heads);
    const int b = int(i / (int64_t(max_seqlen) * heads));
    const int start = cu[b], len = cu[b + 1] - start;
    stats[i] = s < len ? lse[(int64_t(start) + s) * heads + h] : 0.f;
  }
}

}  // namespace

void cudnn_varlen_metadata(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_kv, int num_seqs,
                           const RaggedStrides& strides, int32_t* seq_lens_q, int32_t* seq_lens_kv,
                           const RaggedOffsets& offsets, cudaStream_t stream) {
  varlen_metadata_kernel<<<grid_for(num_seqs + 1, 256), 256, 0, stream>>>(cu_seqlens_q, cu_seqlens_kv, num_seqs,
                                                                          strides, seq_lens_q, seq_lens_kv, offsets);
  CUDA_CHECK_LAUNCH("cudnn attention (ragged offsets)");
}

void lse_to_padded_stats(const float* lse, const int32_t* cu_seqlens, int num_seqs, int heads, int max_seqlen,
                         float* stats, cudaStream_t stream) {
  const int64_t total = int64_t(num_seqs) * heads * max_seqlen;
  padded_stats_kernel<<<grid_for(total, 256), 256, 0, stream>>>(lse, cu_seqlens, num_seqs, heads, max_seqlen,
                                                                stats);
  CUDA_CHECK_LAUNCH("cudnn attention (padded stats)");
}

}  // namespace bb::cuda

#endif  // BB_WITH_CUDNN
