// From a host PackedBatch microbatch to the tensors a ModelChunk consumes.
//
// Labels and loss mask shift by one within each sequence (position t is
// scored on the token at t+1; a sequence's last position is never scored).
// The token count is padded to a multiple of `pad_multiple` (tp, so sequence
// parallelism can split tokens evenly) with one extra padding sequence whose
// positions carry mask 0.
#pragma once

#include <vector>

#include "bumblebee/model/protocol.h"
#include "bumblebee/runtime/packed_batch.h"

namespace bb {

struct PreparedMicroBatch {
  DeviceMicroBatch device;
  std::vector<double> loss_mask;   // [T padded], shifted; 1 where the position is scored
  Tensor device_loss_mask;         // the same on the compute device, in the loss (stat) dtype
  std::vector<bool> has_label;     // [T padded]; false for each sequence's last position and padding
  int64_t real_tokens = 0;         // tokens before padding
  double loss_tokens = 0;          // sum of loss_mask
};

// Splits a batch into `n` microbatches of whole sequences, as evenly as the
// sequence counts allow. Every microbatch gets at least one sequence.
std::vector<PackedBatch> split_microbatches(const PackedBatch& batch, int n);

PreparedMicroBatch prepare_microbatch(const PackedBatch& mb, int64_t vocab_size, int64_t pad_multiple, Device dev,
                                      DType loss_dtype);

}  // namespace bb
