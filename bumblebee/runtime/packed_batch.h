// PackedBatch: the data contract of forward_backward (packed THD, no padding).
//
// Sequences are concatenated: input_ids[T], labels[T] and loss_mask[T] run
// over all tokens, seq_lens[S] says where each sequence ends. Inside the model
// labels and loss_mask shift by one within each sequence (position t predicts
// labels[t+1]); the last token of a sequence predicts nothing. position_ids
// default to a per-sequence arange. Host vectors: the runtime moves them to the
// device and splits them into microbatches by whole sequences.
//
// MoE router replay (primitive/modules/moe/router_replay.h): router_replay
// "record" fills each microbatch's ModelOutputs::routed_experts from the
// forward; "replay" routes every token to the experts in routed_experts,
// [T x MoE layers x k] token-major (token t's k ids for MoE layer l at
// (t L + l) k), checked against the model's shape and expert count.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bb {

struct PackedBatch {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
  std::vector<int64_t> seq_lens;
  std::vector<float> loss_mask;        // empty = every position counts
  std::vector<int64_t> position_ids;   // empty = arange per sequence
  std::map<std::string, std::vector<double>> extras;
  std::vector<int64_t> routed_experts;   // router replay's choices; empty unless replaying
  std::string router_replay;             // "" (off) | "record" | "replay"

  int64_t total_tokens() const { return int64_t(input_ids.size()); }
  int64_t num_seqs() const { return int64_t(seq_lens.size()); }
  std::vector<int32_t> cu_seqlens() const;   // [S+1], from 0
  // Throws bb::Error naming the field when sizes disagree.
  void validate() const;
  // Fills labels = input_ids when empty, and position_ids when empty.
  PackedBatch with_defaults() const;
  // Sequences [first, first + count) as their own batch.
  PackedBatch slice_sequences(int64_t first, int64_t count) const;
};

}  // namespace bb
