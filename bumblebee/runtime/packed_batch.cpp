// PackedBatch derived fields, defaults, validation and slicing.
#include "bumblebee/runtime/packed_batch.h"

#include "bumblebee/core/error.h"

namespace bb {

std::vector<int32_t> PackedBatch::cu_seqlens() const {
  std::vector<int32_t> cu(seq_lens.size() + 1, 0);
  for (size_t i = 0; i < seq_lens.size(); ++i) cu[i + 1] = cu[i] + int32_t(seq_lens[i]);
  return cu;
}

void PackedBatch::validate() const {
  int64_t total = 0;
  for (int64_t l : seq_lens) {
    BB_CHECK(l > 0, "PackedBatch: seq_lens holds a non-positive length ", l);
    total += l;
  }
  BB_CHECK(total == total_tokens(), "PackedBatch: seq_lens sum to ", total, " but input_ids holds ", total_tokens(),
           " tokens");
  BB_CHECK(labels.empty() || labels.size() == input_ids.size(), "PackedBatch: labels has ", labels.size(),
           " entries, input_ids ", input_ids.size());
  BB_CHECK(loss_mask.empty() || loss_mask.size() == input_ids.size(), "PackedBatch: loss_mask has ",
           loss_mask.size(), " entries, input_ids ", input_ids.size());
  BB_CHECK(position_ids.empty() || position_ids.size() == input_ids.size(), "PackedBatch: position_ids has ",
           position_ids.size(), " entries, input_ids ", input_ids.size());
}

PackedBatch PackedBatch::with_defaults() const {
  validate();
  PackedBatch b = *this;
  if (b.labels.empty()) b.labels = b.input_ids;
  if (b.position_ids.empty()) {
    b.position_ids.reserve(b.input_ids.size());
    for (int64_t l : b.seq_lens)
      for (int64_t p = 0; p < l; ++p) b.position_ids.push_back(p);
  }
  if (b.loss_mask.empty()) b.loss_mask.assign(b.input_ids.size(), 1.0f);
  return b;
}

PackedBatch PackedBatch::slice_sequences(int64_t first, int64_t count) const {
  BB_CHECK(first >= 0 && count >= 0 && first + count <= num_seqs(), "PackedBatch: sequences [", first, ", ",
           first + count, ") out of range for ", num_seqs(), " sequences");
  int64_t start = 0;
  for (int64_t i = 0; i < first; ++i) start += seq_lens[size_t(i)];
  int64_t len = 0;
  for (int64_t i = first; i < first + count; ++i) len += seq_lens[size_t(i)];
  auto cut = [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    return v.empty() ? V{} : V(v.begin() + start, v.begin() + start + len);
  };
  PackedBatch b;
  b.input_ids = cut(input_ids);
  b.labels = cut(labels);
  b.loss_mask = cut(loss_mask);
  b.position_ids = cut(position_ids);
  b.seq_lens.assign(seq_lens.begin() + first, seq_lens.begin() + first + count);
  for (const auto& [k, v] : extras) b.extras[k] = v.size() == input_ids.size() ? cut(v) : v;
  // routed_experts runs over tokens with a fixed stride (checked by the
  // runtime: MoE layers x k); a size the tokens do not divide is kept whole.
  b.router_replay = router_replay;
  const size_t per_token = input_ids.empty() ? 0 : routed_experts.size() / input_ids.size();
  if (per_token > 0 && per_token * input_ids.size() == routed_experts.size())
    b.routed_experts.assign(routed_experts.begin() + start * int64_t(per_token),
                            routed_experts.begin() + (start + len) * int64_t(per_token));
  else
    b.routed_experts = routed_experts;
  return b;
}

}  // namespace bb
