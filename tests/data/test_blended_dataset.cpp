// BlendedDataset: Megatron's lag-the-most interleaving, checked by hand and at every prefix.
#include "bumblebee/data/blended_dataset.h"

#include <gtest/gtest.h>

#include <cmath>

#include "data_test_support.h"

using bb::test::error_message;

namespace {

// Sample k of dataset `id` is {id, k}.
class Numbered : public bb::SampleDataset {
 public:
  Numbered(int64_t id, int64_t size) : id_(id), size_(size) {}
  int64_t size() const override { return size_; }
  std::vector<int64_t> sample(int64_t i) const override { return {id_, i}; }
  int64_t seq_len() const override { return 1; }

 private:
  int64_t id_, size_;
};

std::vector<std::shared_ptr<const bb::SampleDataset>> numbered(const std::vector<int64_t>& sizes) {
  std::vector<std::shared_ptr<const bb::SampleDataset>> out;
  for (size_t d = 0; d < sizes.size(); ++d) out.push_back(std::make_shared<Numbered>(int64_t(d), sizes[d]));
  return out;
}

}  // namespace

TEST(BlendedDataset, FirstPicksFollowTheRule) {
  const bb::BlendedDataset b(numbered({100, 100, 100}), {5, 3, 2}, 8);
  // i=0 (target 1): lags .5 .3 .2 -> 0; i=1 (target 1): -.5 .3 .2 -> 1; i=2 (target 2): 0 -.4 .4 -> 2;
  // i=3 (target 3): .5 -.1 -.4 -> 0; i=4 (target 4): 0 .2 -.2 -> 1; ...
  EXPECT_EQ(b.dataset_index(), (std::vector<int16_t>{0, 1, 2, 0, 1, 0, 2, 0}));
  EXPECT_EQ(b.dataset_sample_index(), (std::vector<int64_t>{0, 0, 0, 1, 1, 2, 1, 3}));
  EXPECT_EQ(b.sample(4), (std::vector<int64_t>{1, 1}));
}

TEST(BlendedDataset, TracksWeightsAtEveryPrefix) {
  const std::vector<double> w = {0.6, 0.25, 0.15};
  const bb::BlendedDataset b(numbered({700, 300, 200}), w, 1000);
  std::vector<int64_t> count(3, 0);
  for (int64_t i = 0; i < b.size(); ++i) {
    ++count[size_t(b.dataset_index()[size_t(i)])];
    for (size_t d = 0; d < 3; ++d)
      ASSERT_LE(std::abs(double(count[d]) - w[d] * double(i + 1)), 1.0) << "prefix " << i + 1 << " dataset " << d;
  }
  EXPECT_EQ(count, (std::vector<int64_t>{600, 250, 150}));
  EXPECT_EQ(bb::BlendedDataset::samples_needed(w, 1000), count);
}

TEST(BlendedDataset, BadBlendsAreErrors) {
  EXPECT_NE(error_message([] { bb::BlendedDataset(numbered({10, 10}), {1}, 5); }).find("2 datasets but 1 weights"),
            std::string::npos);
  EXPECT_NE(error_message([] { bb::BlendedDataset(numbered({10, 10}), {1, 0}, 5); }).find("weight 1 is 0"),
            std::string::npos);
  const std::string msg = error_message([] { bb::BlendedDataset(numbered({100, 3}), {1, 1}, 10); });
  EXPECT_NE(msg.find("dataset 1 (weight 0.5) must supply 5 samples but holds 3"), std::string::npos) << msg;
}
