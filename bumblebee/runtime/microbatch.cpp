// Microbatch splitting, shifting and padding.
#include "bumblebee/runtime/microbatch.h"

#include <algorithm>

namespace bb {

std::vector<PackedBatch> split_microbatches(const PackedBatch& batch, int n) {
  BB_CHECK(n >= 1, "num_microbatches must be >= 1, got ", n);
  BB_CHECK(batch.num_seqs() >= n, "num_microbatches ", n, " exceeds the ", batch.num_seqs(),
           " sequences of the batch");
  std::vector<PackedBatch> out;
  int64_t first = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t count = batch.num_seqs() / n + (i < batch.num_seqs() % n ? 1 : 0);
    out.push_back(batch.slice_sequences(first, count));
    first += count;
  }
  return out;
}

std::vector<int64_t> zigzag_token_order(const std::vector<int32_t>& cu_seqlens, int cp, int cp_rank) {
  BB_CHECK(cp >= 1 && cp_rank >= 0 && cp_rank < cp, "cp rank ", cp_rank, " is outside [0, ", cp, ")");
  std::vector<int64_t> first, second;
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    const int64_t begin = cu_seqlens[s], len = cu_seqlens[s + 1] - begin;
    BB_CHECK(len % (2 * cp) == 0, "sequence ", s, " of length ", len, " cannot be split into 2 x cp = ", 2 * cp,
             " equal chunks for context parallelism");
    const int64_t chunk = len / (2 * cp);
    for (int64_t t = 0; t < chunk; ++t) {
      first.push_back(begin + cp_rank * chunk + t);
      second.push_back(begin + (2 * cp - 1 - cp_rank) * chunk + t);
    }
  }
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

namespace {

// One position of the prepared microbatch: the microbatch token it holds (or
// -1 for padding) and its rotary position.
struct Slot {
  int64_t token, position;
};

}  // namespace

PreparedMicroBatch prepare_microbatch(const PackedBatch& mb_in, int64_t vocab_size, int64_t pad_multiple,
                                      Device dev, DType loss_dtype, ContextSplit cp) {
  BB_CHECK(pad_multiple >= 1, "pad_multiple must be >= 1, got ", pad_multiple);
  BB_CHECK(cp.size >= 1 && cp.rank >= 0 && cp.rank < cp.size, "cp rank ", cp.rank, " is outside [0, ", cp.size, ")");
  const PackedBatch mb = mb_in.with_defaults();
  const int64_t T = mb.total_tokens();
  for (int64_t i = 0; i < T; ++i) {
    const int64_t id = mb.input_ids[size_t(i)];
    BB_CHECK(id >= 0 && id < vocab_size, "token id ", id, " at position ", i, " is outside the vocabulary [0, ",
             vocab_size, ")");
  }
  const std::vector<int32_t> cu = mb.cu_seqlens();
  // The shifted labels and mask of every token of the microbatch.
  std::vector<int64_t> labels(size_t(T), 0);
  std::vector<double> mask(size_t(T), 0.0);
  std::vector<bool> has_label(size_t(T), false);
  double microbatch_loss_tokens = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int64_t t = cu[s]; t + 1 < cu[s + 1]; ++t) {
      const int64_t label = mb.labels[size_t(t + 1)];
      const double m = mb.loss_mask[size_t(t + 1)];
      BB_CHECK(m == 0.0 || (label >= 0 && label < vocab_size), "label ", label, " at position ", t + 1,
               " is outside the vocabulary [0, ", vocab_size, ")");
      labels[size_t(t)] = label >= 0 && label < vocab_size ? label : 0;
      has_label[size_t(t)] = true;
      mask[size_t(t)] = m;
      microbatch_loss_tokens += m;
    }
  }

  std::vector<Slot> slots;
  std::vector<int32_t> out_cu;
  int64_t max_len = 0;
  if (cp.size == 1) {
    for (int64_t t = 0; t < T; ++t) slots.push_back({t, mb.position_ids[size_t(t)]});
    out_cu = cu;
    for (size_t s = 0; s + 1 < cu.size(); ++s) max_len = std::max<int64_t>(max_len, cu[s + 1] - cu[s]);
    const int64_t padded = (T + pad_multiple - 1) / pad_multiple * pad_multiple;
    if (padded > T) {
      out_cu.push_back(int32_t(padded));
      for (int64_t t = T; t < padded; ++t) slots.push_back({-1, t - T});
      max_len = std::max(max_len, padded - T);
    }
  } else {
    // Each sequence padded on its own, its padding continuing its positions, so
    // every chunk is whole and every rank's local token count divides by tp.
    const int64_t multiple = 2 * cp.size * pad_multiple;
    std::vector<Slot> padded_slots;
    std::vector<int32_t> padded_cu{0};
    out_cu = {0};
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      const int64_t len = cu[s + 1] - cu[s], padded_len = (len + multiple - 1) / multiple * multiple;
      for (int64_t t = cu[s]; t < cu[s + 1]; ++t) padded_slots.push_back({t, mb.position_ids[size_t(t)]});
      const int64_t last = len > 0 ? mb.position_ids[size_t(cu[s + 1] - 1)] : -1;
      for (int64_t t = len; t < padded_len; ++t) padded_slots.push_back({-1, last + 1 + (t - len)});
      padded_cu.push_back(int32_t(padded_slots.size()));
      out_cu.push_back(int32_t(padded_cu.back() / (2 * cp.size)));
      max_len = std::max(max_len, padded_len / (2 * cp.size));
    }
    for (int64_t i : zigzag_token_order(padded_cu, cp.size, cp.rank)) slots.push_back(padded_slots[size_t(i)]);
  }

  const int64_t n = int64_t(slots.size());
  std::vector<int64_t> ids(size_t(n), 0), out_labels(size_t(n), 0), pos(size_t(n), 0);
  PreparedMicroBatch out;
  out.loss_mask.assign(size_t(n), 0.0);
  out.has_label.assign(size_t(n), false);
  out.token_index.assign(size_t(n), -1);
  for (int64_t i = 0; i < n; ++i) {
    const Slot& sl = slots[size_t(i)];
    pos[size_t(i)] = sl.position;
    out.token_index[size_t(i)] = sl.token;
    if (sl.token < 0) continue;
    ids[size_t(i)] = mb.input_ids[size_t(sl.token)];
    out_labels[size_t(i)] = labels[size_t(sl.token)];
    out.loss_mask[size_t(i)] = mask[size_t(sl.token)];
    out.has_label[size_t(i)] = has_label[size_t(sl.token)];
    out.loss_tokens += mask[size_t(sl.token)];
  }
  out.real_tokens = T;
  out.microbatch_loss_tokens = microbatch_loss_tokens;
  DeviceMicroBatch& d = out.device;
  d.input_ids = Tensor::from_vector(ids, {n}).to(dev);
  d.labels = Tensor::from_vector(out_labels, {n}).to(dev);
  d.seq.position_ids = Tensor::from_vector(pos, {n}).to(dev);
  d.seq.cu_seqlens = Tensor::from_vector(out_cu, {int64_t(out_cu.size())}).to(dev);
  d.seq.max_seqlen = max_len;
  d.num_tokens = n;
  out.device_loss_mask = Tensor::from_doubles(out.loss_mask, {n}, loss_dtype).to(dev);
  d.loss_mask = out.device_loss_mask;
  return out;
}

}  // namespace bb
