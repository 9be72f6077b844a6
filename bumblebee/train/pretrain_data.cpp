// Pretraining TrainData over GPTDataset / BlendedDataset.
#include "bumblebee/train/pretrain_data.h"

#include <sstream>

#include "bumblebee/core/error.h"
#include "bumblebee/data/blended_dataset.h"
#include "bumblebee/data/gpt_dataset.h"
#include "bumblebee/data/indexed_dataset.h"

namespace bb::train {

namespace {

// `count` samples starting at `first`, each as one sequence.
PackedBatch samples_batch(const SampleDataset& ds, int64_t first, int64_t count) {
  PackedBatch b;
  for (int64_t i = first; i < first + count; ++i) {
    const std::vector<int64_t> tokens = ds.sample(i);
    b.input_ids.insert(b.input_ids.end(), tokens.begin(), tokens.end());
    b.seq_lens.push_back(int64_t(tokens.size()));
  }
  return b;
}

// The samples of one split (0 = train, 1 = valid) of every dataset, blended when there are several.
std::shared_ptr<const SampleDataset> split_dataset(const std::vector<std::shared_ptr<const IndexedDataset>>& datasets,
                                                   const std::vector<std::vector<int64_t>>& documents,
                                                   const std::vector<double>& weights, int64_t seq_len,
                                                   int64_t num_samples, uint64_t seed, const char* split_name) {
  const std::vector<int64_t> needed =
      datasets.size() == 1 ? std::vector<int64_t>{num_samples} : BlendedDataset::samples_needed(weights, num_samples);
  std::vector<std::shared_ptr<const SampleDataset>> parts;
  for (size_t d = 0; d < datasets.size(); ++d) {
    BB_CHECK(!documents[d].empty(), "data.prefixes ", datasets[d]->prefix(), " has ", datasets[d]->sequence_count(),
             " documents, too few to give the ", split_name, " split any (see data.split)");
    GPTDatasetConfig c;
    c.seq_len = seq_len;
    c.num_samples = std::max<int64_t>(needed[d], 1);
    c.seed = seed;
    c.documents = documents[d];
    parts.push_back(std::make_shared<GPTDataset>(datasets[d], c));
  }
  if (parts.size() == 1) return parts.front();
  return std::make_shared<BlendedDataset>(parts, weights, num_samples);
}

class PretrainData : public TrainData {
 public:
  PretrainData(std::shared_ptr<const SampleDataset> train, int64_t per_rank, int64_t global, DataRank dp)
      : train_(std::move(train)), per_rank_(per_rank), global_(global), dp_(dp) {}

  PackedBatch train_batch(int64_t step) const override {
    return samples_batch(*train_, step * global_ + dp_.rank * per_rank_, per_rank_);
  }

  void set_valid(const SampleDataset& valid, int64_t eval_batches) {
    for (int64_t b = 0; b < eval_batches; ++b)
      valid_batches_.push_back(samples_batch(valid, b * global_ + dp_.rank * per_rank_, per_rank_));
  }
  void set_description(std::string d) { description_ = std::move(d); }

 private:
  std::shared_ptr<const SampleDataset> train_;
  int64_t per_rank_, global_;
  DataRank dp_;
};

}  // namespace

std::unique_ptr<TrainData> make_pretrain_data(const std::vector<std::string>& prefixes,
                                              const std::vector<double>& weights, const DataRecipe& data,
                                              const TrainRecipe& train, int64_t vocab_size, DataRank dp) {
  std::vector<std::shared_ptr<const IndexedDataset>> datasets;
  std::vector<std::vector<int64_t>> train_docs, valid_docs;
  int64_t total_tokens = 0;
  for (const std::string& prefix : prefixes) {
    auto ds = std::make_shared<const IndexedDataset>(prefix);
    ds->check_vocab(vocab_size);
    auto parts = split_documents(ds->sequence_count(), {data.train_fraction, data.valid_fraction});
    train_docs.push_back(std::move(parts[0]));
    valid_docs.push_back(std::move(parts[1]));
    total_tokens += ds->total_tokens();
    datasets.push_back(std::move(ds));
  }
  const std::vector<double> w = weights.empty() ? std::vector<double>(prefixes.size(), 1.0) : weights;
  const int64_t per_rank = train.micro_batch_size * train.num_microbatches;
  const int64_t global = per_rank * dp.size;
  auto train_set = split_dataset(datasets, train_docs, w, data.seq_len, train.steps * global, train.seed, "train");
  auto out = std::make_unique<PretrainData>(train_set, per_rank, global, dp);
  int64_t valid_samples = 0;
  if (train.eval_batches > 0) {
    valid_samples = train.eval_batches * global;
    auto valid_set = split_dataset(datasets, valid_docs, w, data.seq_len, valid_samples, train.seed + 1, "valid");
    out->set_valid(*valid_set, train.eval_batches);
  }
  int64_t train_doc_count = 0, valid_doc_count = 0;
  for (size_t d = 0; d < datasets.size(); ++d) {
    train_doc_count += int64_t(train_docs[d].size());
    valid_doc_count += int64_t(valid_docs[d].size());
  }
  std::ostringstream desc;
  desc << "pretrain data: " << prefixes.size() << " dataset(s), " << total_tokens << " tokens; documents "
       << train_doc_count << " train / " << valid_doc_count << " valid; " << train.steps * global << " train samples ("
       << global << " per step) and " << valid_samples << " valid samples of " << data.seq_len << " tokens";
  if (datasets.size() == 1) {
    desc << "; " << static_cast<const GPTDataset&>(*train_set).num_epochs() << " epoch(s) of the train documents";
  }
  out->set_description(desc.str());
  return out;
}

}  // namespace bb::train
