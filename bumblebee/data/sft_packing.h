// SFT packing: variable-length conversations into PackedBatch with prompt/response loss masks.
//
// A conversation is a list of turns, each (prompt tokens, response tokens);
// its sequence is prompt_1 response_1 prompt_2 response_2 ... Only response
// tokens are trained on.
//
// Mask convention (PackedBatch's): labels = input_ids, and loss_mask[t] says
// whether token t is a TARGET. The model shifts inside each sequence, so
// position t-1 predicts token t and its loss is weighted by loss_mask[t]. Hence
// loss_mask is 1 on every response token (the first response token is
// predicted from the last prompt token) and 0 on every prompt token; the
// first token of a sequence is never a target whatever its mask.
//
// Packing is greedy and keeps order: conversations join the current batch
// until the next one would pass max_tokens_per_batch, which then starts a new
// batch. A conversation longer than the budget is cut to max_tokens_per_batch
// tokens (its tail is lost; the count is reported). Empty conversations are skipped.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/runtime/packed_batch.h"

namespace bb {

struct ConversationTurn {
  std::vector<int64_t> prompt;
  std::vector<int64_t> response;
};
using Conversation = std::vector<ConversationTurn>;

struct SftPacking {
  std::vector<PackedBatch> batches;
  int64_t truncated_conversations = 0;
  int64_t skipped_empty_conversations = 0;
};

SftPacking pack_conversations(const std::vector<Conversation>& conversations, int64_t max_tokens_per_batch);

}  // namespace bb
