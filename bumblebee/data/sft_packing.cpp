// Greedy in-order packing of conversations into PackedBatch sequences with response-only loss masks.
#include "bumblebee/data/sft_packing.h"

#include "bumblebee/core/error.h"

namespace bb {

SftPacking pack_conversations(const std::vector<Conversation>& conversations, int64_t max_tokens_per_batch) {
  BB_CHECK(max_tokens_per_batch > 0, "pack_conversations: max_tokens_per_batch must be positive, got ",
           max_tokens_per_batch);
  SftPacking out;
  PackedBatch batch;
  std::vector<int64_t> ids;
  std::vector<float> mask;
  for (const Conversation& conversation : conversations) {
    ids.clear();
    mask.clear();
    for (const ConversationTurn& turn : conversation) {
      ids.insert(ids.end(), turn.prompt.begin(), turn.prompt.end());
      mask.insert(mask.end(), turn.prompt.size(), 0.0f);
      ids.insert(ids.end(), turn.response.begin(), turn.response.end());
      mask.insert(mask.end(), turn.response.size(), 1.0f);
    }
    if (ids.empty()) {
      ++out.skipped_empty_conversations;
      continue;
    }
    if (int64_t(ids.size()) > max_tokens_per_batch) {
      ids.resize(size_t(max_tokens_per_batch));
      mask.resize(size_t(max_tokens_per_batch));
      ++out.truncated_conversations;
    }
    if (batch.total_tokens() + int64_t(ids.size()) > max_tokens_per_batch) {
      out.batches.push_back(std::move(batch));
      batch = PackedBatch();
    }
    batch.input_ids.insert(batch.input_ids.end(), ids.begin(), ids.end());
    batch.labels.insert(batch.labels.end(), ids.begin(), ids.end());
    batch.loss_mask.insert(batch.loss_mask.end(), mask.begin(), mask.end());
    batch.seq_lens.push_back(int64_t(ids.size()));
  }
  if (batch.total_tokens() > 0) out.batches.push_back(std::move(batch));
  return out;
}

}  // namespace bb
