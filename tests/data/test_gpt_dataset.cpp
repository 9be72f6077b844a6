// GPTDataset: samples equal windows of the shuffled document stream; shuffles are seeded and per epoch.
#include "bumblebee/data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "bumblebee/data/indexed_dataset_builder.h"
#include "data_test_support.h"

using bb::test::error_message;
using bb::test::TempDir;

namespace {

// Documents of the given lengths; token p of document d is 1000 * d + p, so every token says where it came from.
std::shared_ptr<const bb::IndexedDataset> make_dataset(const TempDir& dir, const std::vector<int64_t>& lengths) {
  bb::IndexedDatasetBuilder b(dir / "gpt", bb::IndexedDType::Int32);
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int64_t> doc;
    for (int64_t p = 0; p < lengths[d]; ++p) doc.push_back(1000 * int64_t(d) + p);
    b.add_document(doc);
  }
  b.finalize();
  return std::make_shared<const bb::IndexedDataset>(dir / "gpt");
}

// The token stream of doc_idx, concatenated.
std::vector<int64_t> stream(const bb::GPTDataset& g, const bb::IndexedDataset& ds) {
  std::vector<int64_t> out;
  for (int64_t d : g.doc_idx()) {
    auto t = ds.get(d);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

}  // namespace

TEST(GPTDataset, SamplesAreOverlappingWindowsOfTheShuffledStream) {
  TempDir dir;
  auto ds = make_dataset(dir, {3, 5, 0, 2, 7});   // 17 tokens per epoch, one empty document
  const bb::GPTDataset g(ds, {.seq_len = 4, .num_samples = 10, .seed = 7, .documents = {}});
  // 1 epoch gives (17-1)/4 = 4 samples, 2 give 8, 3 give (51-1)/4 = 12 >= 10.
  EXPECT_EQ(g.num_epochs(), 3);
  EXPECT_EQ(g.tokens_per_epoch(), 17);
  ASSERT_EQ(g.size(), 12);
  const auto s = stream(g, *ds);
  ASSERT_EQ(s.size(), 51u);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < g.size(); ++i) {
    const int64_t k = g.shuffle_idx()[size_t(i)];
    seen.insert(k);
    const std::vector<int64_t> want(s.begin() + 4 * k, s.begin() + 4 * k + 5);
    EXPECT_EQ(g.sample(i), want) << "sample " << i << " (unshuffled " << k << ")";
  }
  EXPECT_EQ(seen.size(), 12u);   // shuffle_idx is a permutation
}

TEST(GPTDataset, EachEpochShufflesEveryDocumentOnce) {
  TempDir dir;
  auto ds = make_dataset(dir, {4, 4, 4, 4, 4, 4, 4, 4});
  const bb::GPTDataset g(ds, {.seq_len = 8, .num_samples = 12, .seed = 1, .documents = {}});
  ASSERT_EQ(g.num_epochs(), 4);   // 32 tokens/epoch: 3, 7, 11, 15 samples
  std::vector<int64_t> identity = {0, 1, 2, 3, 4, 5, 6, 7};
  bool any_shuffled = false;
  for (int64_t e = 0; e < g.num_epochs(); ++e) {
    std::vector<int64_t> epoch(g.doc_idx().begin() + 8 * e, g.doc_idx().begin() + 8 * (e + 1));
    any_shuffled |= epoch != identity;
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, identity) << "epoch " << e;
  }
  EXPECT_TRUE(any_shuffled);
}

TEST(GPTDataset, ShuffleIsDeterministicBySeed) {
  TempDir dir;
  auto ds = make_dataset(dir, {5, 9, 3, 11, 6, 2});
  const bb::GPTDatasetConfig cfg{.seq_len = 3, .num_samples = 20, .seed = 42, .documents = {}};
  const bb::GPTDataset a(ds, cfg), b(ds, cfg);
  bb::GPTDatasetConfig other = cfg;
  other.seed = 43;
  const bb::GPTDataset c(ds, other);
  EXPECT_EQ(a.doc_idx(), b.doc_idx());
  EXPECT_EQ(a.shuffle_idx(), b.shuffle_idx());
  for (int64_t i = 0; i < a.size(); ++i) EXPECT_EQ(a.sample(i), b.sample(i));
  EXPECT_NE(a.shuffle_idx(), c.shuffle_idx());
}

TEST(GPTDataset, UsesOnlyTheGivenDocuments) {
  TempDir dir;
  auto ds = make_dataset(dir, {10, 10, 10, 10});
  const bb::GPTDataset g(ds, {.seq_len = 5, .num_samples = 3, .seed = 3, .documents = {1, 3}});
  EXPECT_EQ(g.tokens_per_epoch(), 20);
  for (int64_t i = 0; i < g.size(); ++i)
    for (int64_t t : g.sample(i)) EXPECT_TRUE(t / 1000 == 1 || t / 1000 == 3) << t;
}

TEST(GPTDataset, BadConfigsAreErrors) {
  TempDir dir;
  auto ds = make_dataset(dir, {3, 0});
  EXPECT_NE(error_message([&] { bb::GPTDataset(ds, {.seq_len = 0, .num_samples = 1, .seed = 1, .documents = {}}); })
                .find("seq_len must be positive"),
            std::string::npos);
  EXPECT_NE(error_message([&] { bb::GPTDataset(ds, {.seq_len = 2, .num_samples = 1, .seed = 1, .documents = {9}}); })
                .find("document 9 out of range"),
            std::string::npos);
  EXPECT_NE(error_message([&] { bb::GPTDataset(ds, {.seq_len = 2, .num_samples = 1, .seed = 1, .documents = {1}}); })
                .find("hold no tokens"),
            std::string::npos);
  const bb::GPTDataset g(ds, {.seq_len = 2, .num_samples = 1, .seed = 1, .documents = {}});
  EXPECT_NE(error_message([&] { g.sample(g.size()); }).find("out of range"), std::string::npos);
}

TEST(GPTDataset, SplitDocuments) {
  const auto s = bb::split_documents(1000, {969, 30, 1});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].size(), 969u);
  EXPECT_EQ(s[1].front(), 969);
  EXPECT_EQ(s[1].size(), 30u);
  EXPECT_EQ(s[2], std::vector<int64_t>{999});
  const auto t = bb::split_documents(10, {0.9, 0.1});
  EXPECT_EQ(t[0].size(), 9u);
  EXPECT_EQ(t[1], std::vector<int64_t>{9});
  EXPECT_NE(error_message([] { bb::split_documents(10, {-1, 2}); }).find("weight -1"), std::string::npos);
}
