// GPTDataset index construction (doc_idx, sample_idx, shuffle_idx) and sample reads.
#include "bumblebee/data/gpt_dataset.h"

#include <cmath>
#include <numeric>

#include "bumblebee/core/error.h"
#include "bumblebee/core/rng.h"

namespace bb {

namespace {

// Fisher-Yates with an unbiased-enough multiply-shift draw (n is far below 2^64).
void shuffle(std::vector<int64_t>::iterator first, std::vector<int64_t>::iterator last, Generator& gen) {
  for (int64_t n = last - first; n > 1; --n) {
    const auto j = int64_t((static_cast<unsigned __int128>(gen.next_u64()) * uint64_t(n)) >> 64);
    std::swap(first[n - 1], first[j]);
  }
}

}  // namespace

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, GPTDatasetConfig config)
    : data_(std::move(data)), config_(std::move(config)) {
  const IndexedDataset& ds = *data_;
  BB_CHECK(config_.seq_len > 0, "GPTDataset: seq_len must be positive, got ", config_.seq_len);
  BB_CHECK(config_.num_samples > 0, "GPTDataset: num_samples must be positive, got ", config_.num_samples);
  if (config_.documents.empty()) {
    config_.documents.resize(size_t(ds.sequence_count()));
    std::iota(config_.documents.begin(), config_.documents.end(), int64_t(0));
  }
  for (int64_t d : config_.documents) {
    BB_CHECK(d >= 0 && d < ds.sequence_count(), "GPTDataset: document ", d, " out of range for ", ds.prefix(),
             " with ", ds.sequence_count(), " sequences");
    tokens_per_epoch_ += ds.sequence_length(d);
  }
  BB_CHECK(tokens_per_epoch_ > 0, "GPTDataset: the documents of ", ds.prefix(), " hold no tokens");

  // Whole samples from e epochs: the last sample needs one token past its seq_len.
  auto samples_in = [&](int64_t epochs) { return (epochs * tokens_per_epoch_ - 1) / config_.seq_len; };
  num_epochs_ = 1;
  while (samples_in(num_epochs_) < config_.num_samples) ++num_epochs_;
  const int64_t num_samples = samples_in(num_epochs_);

  Generator gen(config_.seed);
  const size_t per_epoch = config_.documents.size();
  doc_idx_.reserve(per_epoch * size_t(num_epochs_));
  for (int64_t e = 0; e < num_epochs_; ++e) {
    doc_idx_.insert(doc_idx_.end(), config_.documents.begin(), config_.documents.end());
    shuffle(doc_idx_.end() - int64_t(per_epoch), doc_idx_.end(), gen);
  }

  sample_doc_.resize(size_t(num_samples) + 1);
  sample_offset_.resize(size_t(num_samples) + 1);
  int64_t d = 0, offset = 0;
  for (int64_t k = 0; k <= num_samples; ++k) {
    // Walk to the token at k * seq_len; empty documents are stepped over.
    while (offset >= ds.sequence_length(doc_idx_[size_t(d)]) && d + 1 < int64_t(doc_idx_.size())) {
      offset -= ds.sequence_length(doc_idx_[size_t(d)]);
      ++d;
    }
    sample_doc_[size_t(k)] = d;
    sample_offset_[size_t(k)] = offset;
    offset += config_.seq_len;
  }

  shuffle_idx_.resize(size_t(num_samples));
  std::iota(shuffle_idx_.begin(), shuffle_idx_.end(), int64_t(0));
  shuffle(shuffle_idx_.begin(), shuffle_idx_.end(), gen);
}

std::vector<int64_t> GPTDataset::sample(int64_t i) const {
  BB_CHECK(i >= 0 && i < size(), "GPTDataset: sample ", i, " out of range [0, ", size(), ")");
  const int64_t k = shuffle_idx_[size_t(i)];
  std::vector<int64_t> tokens(size_t(config_.seq_len + 1));
  int64_t filled = 0, d = sample_doc_[size_t(k)], offset = sample_offset_[size_t(k)];
  while (filled < int64_t(tokens.size())) {
    const int64_t doc = doc_idx_[size_t(d)];
    const int64_t take = std::min<int64_t>(data_->sequence_length(doc) - offset, int64_t(tokens.size()) - filled);
    data_->read(doc, offset, take, tokens.data() + filled);
    filled += take;
    ++d;
    offset = 0;
  }
  return tokens;
}

std::vector<std::vector<int64_t>> split_documents(int64_t num_documents, const std::vector<double>& weights) {
  BB_CHECK(!weights.empty(), "split_documents: no weights");
  double total = 0;
  for (double w : weights) {
    BB_CHECK(std::isfinite(w) && w >= 0, "split_documents: weight ", w, " is not a finite non-negative number");
    total += w;
  }
  BB_CHECK(total > 0, "split_documents: weights sum to zero");
  std::vector<std::vector<int64_t>> out;
  double cumulative = 0;
  int64_t begin = 0;
  for (double w : weights) {
    cumulative += w;
    const int64_t end = std::min(num_documents, int64_t(std::llround(cumulative / total * double(num_documents))));
    std::vector<int64_t> range(size_t(std::max<int64_t>(end - begin, 0)));
    std::iota(range.begin(), range.end(), begin);
    out.push_back(std::move(range));
    begin = std::max(begin, end);
  }
  return out;
}

}  // namespace bb
