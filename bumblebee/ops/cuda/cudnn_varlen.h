// Metadata kernels for cuDNN's ragged (THD) attention, built from cu_seqlens
// on the device so that no step reads sequence lengths back to the host.
// Compiled only with BB_WITH_CUDNN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace bb::cuda {

// Elements between consecutive tokens of each ragged tensor: q and dq
// (Hq * Dqk), k and dk (Hkv * Dqk), v and dv (Hkv * Dv), out and dout
// (Hq * Dv), the stats (Hq). The q/k and v head dims differ in multi-head
// latent attention, so every tensor kind has its own offsets.
struct RaggedStrides {
  int64_t q, k, v, o, stats;
};

// Element offsets of sequence b (b <= num_seqs) in each ragged tensor, each
// array [num_seqs + 1]: q, o and stats from cu_seqlens_q, k and v from cu_seqlens_kv.
struct RaggedOffsets {
  int64_t *q, *k, *v, *o, *stats;
};

// seq_lens_q[b] = cu_q[b+1] - cu_q[b] and seq_lens_kv[b] likewise from cu_kv
// (b < num_seqs); offsets.X[b] = cu[b] * strides.X.
void cudnn_varlen_metadata(const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_kv, int num_seqs,
                           const RaggedStrides& strides, int32_t* seq_lens_q, int32_t* seq_lens_kv,
                           const RaggedOffsets& offsets, cudaStream_t stream);

// stats [num_seqs, heads, max_seqlen] (zero past each sequence's end) from
// lse [Tq, heads] and the query offsets cu_seqlens: the padded layout cuDNN's
// backward reads its softmax stats in.
void lse_to_padded_stats(const float* lse, const int32_t* cu_seqlens, int num_seqs, int heads, int max_seqlen,
                         float* stats, cudaStream_t stream);

}  // namespace bb::cuda
