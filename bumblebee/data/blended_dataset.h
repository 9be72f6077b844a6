// BlendedDataset: several sample datasets mixed by weight, deterministically.
//
// Megatron-LM's blending rule: sample i goes to the dataset whose count lags
// its target the most, argmax_d(weight_d * max(i, 1) - count_d), ties to the
// lower index, and takes that dataset's next unused sample. The mix therefore
// tracks the weights at every prefix, not just on average.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bumblebee/data/sample_dataset.h"

namespace bb {

class BlendedDataset : public SampleDataset {
 public:
  // Weights need not sum to one. Each dataset must hold the samples the blend
  // takes from it (samples_needed); a short one is a bb::Error naming it.
  BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets, std::vector<double> weights,
                 int64_t size);

  int64_t size() const override { return int64_t(dataset_index_.size()); }
  std::vector<int64_t> sample(int64_t i) const override;
  int64_t seq_len() const override { return datasets_.front()->seq_len(); }

  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

  // How many samples of each dataset a blend of `size` samples takes.
  static std::vector<int64_t> samples_needed(const std::vector<double>& weights, int64_t size);

 private:
  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace bb
