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

PreparedMicroBatch prepare_microbatch(const PackedBatch& mb_in, int64_t vocab_size, int64_t pad_multiple,
                                      Device dev, DType loss_dtype) {
  BB_CHECK(pad_multiple >= 1, "pad_multiple must be >= 1, got ", pad_multiple);
  const PackedBatch mb = mb_in.with_defaults();
  const int64_t T = mb.total_tokens();
  for (int64_t i = 0; i < T; ++i) {
    const int64_t id = mb.input_ids[size_t(i)];
    BB_CHECK(id >= 0 && id < vocab_size, "token id ", id, " at position ", i, " is outside the vocabulary [0, ",
             vocab_size, ")");
  }
  const int64_t padded = (T + pad_multiple - 1) / pad_multiple * pad_multiple;
  std::vector<int64_t> ids(size_t(padded), 0), labels(size_t(padded), 0), pos(size_t(padded), 0);
  std::vector<int32_t> cu = mb.cu_seqlens();
  PreparedMicroBatch out;
  out.loss_mask.assign(size_t(padded), 0.0);
  out.has_label.assign(size_t(padded), false);
  int64_t max_len = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t b = cu[s], e = cu[s + 1];
    max_len = std::max(max_len, e - b);
    for (int64_t t = b; t < e; ++t) {
      ids[size_t(t)] = mb.input_ids[size_t(t)];
      pos[size_t(t)] = mb.position_ids[size_t(t)];
      if (t + 1 < e) {
        const int64_t label = mb.labels[size_t(t + 1)];
        const double m = mb.loss_mask[size_t(t + 1)];
        BB_CHECK(m == 0.0 || (label >= 0 && label < vocab_size), "label ", label, " at position ", t + 1,
                 " is outside the vocabulary [0, ", vocab_size, ")");
        labels[size_t(t)] = label >= 0 && label < vocab_size ? label : 0;
        out.has_label[size_t(t)] = true;
        out.loss_mask[size_t(t)] = m;
        out.loss_tokens += m;
      }
    }
  }
  if (padded > T) {
    cu.push_back(int32_t(padded));
    for (int64_t t = T; t < padded; ++t) pos[size_t(t)] = t - T;
    max_len = std::max(max_len, padded - T);
  }
  out.real_tokens = T;
  DeviceMicroBatch& d = out.device;
  d.input_ids = Tensor::from_vector(ids, {padded}).to(dev);
  d.labels = Tensor::from_vector(labels, {padded}).to(dev);
  d.seq.position_ids = Tensor::from_vector(pos, {padded}).to(dev);
  d.seq.cu_seqlens = Tensor::from_vector(cu, {int64_t(cu.size())}).to(dev);
  d.seq.max_seqlen = max_len;
  d.num_tokens = padded;
  out.device_loss_mask = Tensor::from_doubles(out.loss_mask, {padded}, loss_dtype).to(dev);
  return out;
}

}  // namespace bb
