// GPTDataset: fixed-length pretraining samples cut across document boundaries, shuffled by seed.
//
// The semantics of Megatron-LM's GPTDataset, built in memory from three indices:
//   doc_idx      the documents of every epoch, each epoch in its own shuffled order
//                (Megatron shuffles all epochs' documents together; per-epoch
//                shuffles keep "every document once per epoch" true);
//   sample_idx   where each sample starts, as (position in doc_idx, token offset);
//   shuffle_idx  a shuffled permutation of the samples.
// Sample k starts seq_len tokens after sample k-1 in the concatenated epoch
// stream and holds seq_len + 1 tokens, so its last token is the first of the
// next sample (inputs = tokens[0:seq_len], labels = tokens[1:seq_len+1]).
// Enough epochs are taken for at least num_samples samples; size() counts all
// whole samples of those epochs. Shuffles use bb::Generator, so they are the
// same on every platform, but not Megatron's numpy streams.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bumblebee/data/indexed_dataset.h"
#include "bumblebee/data/sample_dataset.h"

namespace bb {

struct GPTDatasetConfig {
  int64_t seq_len = 0;
  int64_t num_samples = 0;   // at least this many samples
  uint64_t seed = 1234;
  // Sequences of the IndexedDataset to use (a train/valid split); empty = all.
  std::vector<int64_t> documents;
};

class GPTDataset : public SampleDataset {
 public:
  GPTDataset(std::shared_ptr<const IndexedDataset> data, GPTDatasetConfig config);

  int64_t size() const override { return int64_t(shuffle_idx_.size()); }
  std::vector<int64_t> sample(int64_t i) const override;
  int64_t seq_len() const override { return config_.seq_len; }

  int64_t num_epochs() const { return num_epochs_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  const std::vector<int64_t>& doc_idx() const { return doc_idx_; }
  // Sample k starts at doc_idx[sample_doc[k]], token sample_offset[k]; entry size() marks the end.
  const std::vector<int64_t>& sample_doc() const { return sample_doc_; }
  const std::vector<int64_t>& sample_offset() const { return sample_offset_; }
  const std::vector<int64_t>& shuffle_idx() const { return shuffle_idx_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  GPTDatasetConfig config_;
  int64_t num_epochs_ = 0, tokens_per_epoch_ = 0;
  std::vector<int64_t> doc_idx_, sample_doc_, sample_offset_, shuffle_idx_;
};

// Contiguous train/valid/test ranges of `num_documents` in proportion to
// `weights` (Megatron's "969,30,1" split); each range lists document numbers.
std::vector<std::vector<int64_t>> split_documents(int64_t num_documents, const std::vector<double>& weights);

}  // namespace bb
