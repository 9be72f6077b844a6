// Metadata kernels for cuDNN's ragged (THD) attention, built from cu_seqlens
// on the device so that no step reads sequence lengths back to the host.
// Compiled only with BB_WITH_CUDNN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace bb::cuda {

// seq_lens_q[b] = cu_q[b+1] - cu_q[b] and seq_lens_kv[b] likewise from cu_kv
// (b < num_seqs); *_offsets[b] = cu[b] * stride, the element offset of
// sequence b (b <= num_seqs) in a tensor whose tokens are `stride` elements
// apart: q_offsets and stats_offsets from cu_q, kv_offsets from cu_kv.
void cudnn_varlen_metadata(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_kv, int num_seqs,
                           int64_t q_stride, int64_t kv_stride, int64_t stats_stride, int32_t* seq_lens_q,
                           int32_t* seq_lens_kv, int64_t* q_offsets, int64_t* kv_offsets, int64_t* stats_offsets,
                           cudaStream_t stream);

// stats [num_seqs, heads, max_seqlen] (zero past each sequence's end) from
// lse [Tq, heads] and the query offsets cu_seqlens: the padded layout cuDNN's
// backward reads its softmax stats in.
void lse_to_padded_stats(const float* lse, const int32_t* cu_seqlens, int num_seqs, int heads, int max_seqlen,
                         float* stats, cudaStream_t stream);

}  // namespace bb::cuda
