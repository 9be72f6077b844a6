// BlendedDataset: the greedy lag-the-most interleaving and sample lookup.
#include "bumblebee/data/blended_dataset.h"

#include <cmath>
#include <limits>

#include "bumblebee/core/error.h"

namespace bb {

namespace {

std::vector<double> normalized(const std::vector<double>& weights) {
  BB_CHECK(!weights.empty(), "BlendedDataset: no datasets");
  BB_CHECK(weights.size() <= size_t(std::numeric_limits<int16_t>::max()), "BlendedDataset: ", weights.size(),
           " datasets is too many");
  double total = 0;
  for (size_t d = 0; d < weights.size(); ++d) {
    BB_CHECK(std::isfinite(weights[d]) && weights[d] > 0, "BlendedDataset: weight ", d, " is ", weights[d],
             "; weights must be positive");
    total += weights[d];
  }
  std::vector<double> w(weights);
  for (double& x : w) x /= total;
  return w;
}

// Calls take(i, d, k): sample i of the blend is sample k of dataset d.
template <typename Take>
void interleave(const std::vector<double>& weights, int64_t size, Take take) {
  std::vector<int64_t> count(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double target = double(std::max<int64_t>(i, 1));
    size_t best = 0;
    double best_lag = weights[0] * target - double(count[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double lag = weights[d] * target - double(count[d]);
      if (lag > best_lag) {
        best = d;
        best_lag = lag;
      }
    }
    take(i, best, count[best]++);
  }
}

}  // namespace

std::vector<int64_t> BlendedDataset::samples_needed(const std::vector<double>& weights, int64_t size) {
  const std::vector<double> w = normalized(weights);
  std::vector<int64_t> needed(w.size(), 0);
  interleave(w, size, [&](int64_t, size_t d, int64_t) { ++needed[d]; });
  return needed;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                               std::vector<double> weights, int64_t size)
    : datasets_(std::move(datasets)) {
  BB_CHECK(datasets_.size() == weights.size(), "BlendedDataset: ", datasets_.size(), " datasets but ",
           weights.size(), " weights");
  BB_CHECK(size > 0, "BlendedDataset: size must be positive, got ", size);
  const std::vector<double> w = normalized(weights);
  for (size_t d = 0; d < datasets_.size(); ++d)
    BB_CHECK(datasets_[d]->seq_len() == datasets_[0]->seq_len(), "BlendedDataset: dataset ", d, " has seq_len ",
             datasets_[d]->seq_len(), ", dataset 0 has ", datasets_[0]->seq_len());
  const std::vector<int64_t> needed = samples_needed(weights, size);
  for (size_t d = 0; d < datasets_.size(); ++d)
    BB_CHECK(needed[d] <= datasets_[d]->size(), "BlendedDataset: dataset ", d, " (weight ", w[d], ") must supply ",
             needed[d], " samples but holds ", datasets_[d]->size(), "; build it with more samples");
  dataset_index_.resize(size_t(size));
  dataset_sample_index_.resize(size_t(size));
  interleave(w, size, [&](int64_t i, size_t d, int64_t k) {
    dataset_index_[size_t(i)] = int16_t(d);
    dataset_sample_index_[size_t(i)] = k;
  });
}

std::vector<int64_t> BlendedDataset::sample(int64_t i) const {
  BB_CHECK(i >= 0 && i < size(), "BlendedDataset: sample ", i, " out of range [0, ", size(), ")");
  return datasets_[size_t(dataset_index_[size_t(i)])]->sample(dataset_sample_index_[size_t(i)]);
}

}  // namespace bb
