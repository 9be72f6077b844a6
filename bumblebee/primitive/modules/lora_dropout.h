// LoRA dropout, HF peft's lora_dropout: the adapter branch reads dropout(x),
//
//   y = x W^T + s B A dropout(x)^T,   dropout(x) = x * mask, mask in {0, 1 / (1 - p)}
//
// in training only (forward_only and eval: the identity). Each microbatch
// carries a key (seed, optimizer step, microbatch, dp and cp rank); each
// adapter mixes in its own name, so q, k and v, which share x, draw masks of
// their own as peft's per-module Dropout does. The mask is a function of the
// key and the element's global index, so backward (and a recomputed forward)
// regenerates exactly the forward's, and every tp rank draws the same mask
// for the replicated input of a column-parallel layer and its own slice of
// the full mask for a row-parallel layer's split input.
#pragma once

#include <cstdint>
#include <string>

#include "bumblebee/core/tensor.h"

namespace bb {

// One microbatch's dropout state, in SequenceLayout (block.h).
struct LoraDropout {
  bool training = false;   // false: dropout is the identity
  uint64_t key = 0;
};

// The key of one microbatch: equal on the ranks of a tp group, different
// over steps, microbatches and the dp and cp ranks (which hold other tokens).
uint64_t lora_dropout_key(uint64_t seed, int64_t step, int64_t microbatch, int dp_rank, int cp_rank);

// x * mask for the adapter `adapter` (its base weight's name): x [T, C] holds
// columns [col_offset, col_offset + C) of the layer's `in_features` inputs.
Tensor lora_dropout_input(const Tensor& x, double p, const LoraDropout& drop, const std::string& adapter,
                          int64_t in_features, int64_t col_offset);
// dx_adapter * mask in place: the gradient through the same mask.
void lora_dropout_backward(Tensor& dx, double p, const LoraDropout& drop, const std::string& adapter,
                           int64_t in_features, int64_t col_offset);

}  // namespace bb
