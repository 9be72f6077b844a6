// From a host PackedBatch microbatch to the tensors a ModelChunk consumes.
//
// Labels and loss mask shift by one within each sequence (position t is
// scored on the token at t+1; a sequence's last position is never scored).
// The token count is padded to a multiple of `pad_multiple` (tp, so sequence
// parallelism can split tokens evenly) with one extra padding sequence whose
// positions carry mask 0.
//
// With context parallelism (cp > 1) every sequence is instead padded on its
// own to a multiple of 2 x cp x pad_multiple, cut into 2 x cp chunks, and cp
// rank r keeps chunks r and 2cp-1-r of each (the zigzag order of Megatron and
// TransformerEngine, which gives every rank the same share of causal work).
// Ids, shifted labels, loss mask and positions follow their tokens.
#pragma once

#include <memory>
#include <vector>

#include "bumblebee/model/protocol.h"
#include "bumblebee/runtime/packed_batch.h"

namespace bb {

struct PreparedMicroBatch {
  DeviceMicroBatch device;
  std::vector<double> loss_mask;   // [T padded], shifted; 1 where the position is scored
  Tensor device_loss_mask;         // the same on the compute device, in the loss (stat) dtype
  std::vector<bool> has_label;     // [T padded]; false for each sequence's last position and padding
  std::vector<int64_t> token_index;   // [T padded]; the microbatch token each position holds, -1 for padding
  int64_t real_tokens = 0;         // tokens before padding (of the whole microbatch with cp)
  double loss_tokens = 0;          // sum of loss_mask (this rank's tokens)
  double microbatch_loss_tokens = 0;   // sum of the whole microbatch's mask: loss_tokens summed over cp
  std::shared_ptr<RouterReplay> router_replay;   // device.seq.router_replay's owner; null: no replay
};

// Which context-parallel rank prepares the microbatch, of how many.
struct ContextSplit {
  int size = 1, rank = 0;
};

// The tokens cp rank `cp_rank` holds under the zigzag split, as indices into
// the packed batch whose sequences have the offsets `cu_seqlens` (each length
// a multiple of 2 x cp), in the rank's order: chunk r of every sequence, then
// chunk 2cp-1-r of every sequence. Both halves then hold the sequences with
// the offsets cu_seqlens / (2 cp), which is how ring attention reads them.
std::vector<int64_t> zigzag_token_order(const std::vector<int32_t>& cu_seqlens, int cp, int cp_rank);

// Splits a batch into `n` microbatches of whole sequences, as evenly as the
// sequence counts allow. Every microbatch gets at least one sequence.
std::vector<PackedBatch> split_microbatches(const PackedBatch& batch, int n);

// With cp.size > 1 the result holds rank cp.rank's tokens in zigzag order and
// device.seq.cu_seqlens the offsets of each sequence's chunk within one half
// of them (see SequenceLayout).
PreparedMicroBatch prepare_microbatch(const PackedBatch& mb, int64_t vocab_size, int64_t pad_multiple, Device dev,
                                      DType loss_dtype, ContextSplit cp = {});

}  // namespace bb
