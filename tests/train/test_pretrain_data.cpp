// Pretraining batches: sample shapes, dp shares, held-out documents, blending by weight.
#include <gtest/gtest.h>

#include <set>

#include "bumblebee/core/error.h"
#include "bumblebee/data/indexed_dataset_builder.h"
#include "bumblebee/train/pretrain_data.h"
#include "tests/data/data_test_support.h"

namespace {

using namespace bb::train;

// `docs` documents of `len` tokens each; document d holds tokens base + d (one value per document).
void write_dataset(const std::string& prefix, int docs, int len, int64_t base) {
  bb::IndexedDatasetBuilder b(prefix, bb::IndexedDType::UInt16);
  for (int d = 0; d < docs; ++d) b.add_document(std::vector<int64_t>(size_t(len), base + d));
  b.finalize();
}

DataRecipe data_recipe() {
  DataRecipe d;
  d.kind = "pretrain";
  d.seq_len = 16;
  d.train_fraction = 0.8;
  d.valid_fraction = 0.2;
  return d;
}

TrainRecipe train_recipe() {
  TrainRecipe t;
  t.steps = 6;
  t.micro_batch_size = 2;
  t.num_microbatches = 2;
  t.eval_batches = 2;
  t.seed = 11;
  return t;
}

TEST(PretrainData, BatchesHoldWholeSamplesAndDpRanksDiffer) {
  bb::test::TempDir dir;
  write_dataset(dir / "a", 10, 40, 100);
  const auto r0 = make_pretrain_data({dir / "a"}, {}, data_recipe(), train_recipe(), 1000, {0, 2});
  const auto r1 = make_pretrain_data({dir / "a"}, {}, data_recipe(), train_recipe(), 1000, {1, 2});
  for (int64_t step = 0; step < 6; ++step) {
    const bb::PackedBatch b = r0->train_batch(step);
    EXPECT_EQ(b.seq_lens, (std::vector<int64_t>{17, 17, 17, 17}));   // seq_len + 1 tokens per sample
    EXPECT_EQ(b.total_tokens(), 68);
    EXPECT_NE(b.input_ids, r1->train_batch(step).input_ids);
    // Documents 8 and 9 (tokens 108, 109) are held out for validation.
    for (int64_t t : b.input_ids) EXPECT_LT(t, 108);
  }
  ASSERT_EQ(r0->valid_batches().size(), 2u);
  for (const bb::PackedBatch& b : r0->valid_batches())
    for (int64_t t : b.input_ids) EXPECT_GE(t, 108);
  // Same seed, same data.
  const auto again = make_pretrain_data({dir / "a"}, {}, data_recipe(), train_recipe(), 1000, {0, 2});
  EXPECT_EQ(again->train_batch(3).input_ids, r0->train_batch(3).input_ids);
}

TEST(PretrainData, BlendFollowsTheWeights) {
  bb::test::TempDir dir;
  write_dataset(dir / "a", 10, 40, 100);
  write_dataset(dir / "b", 10, 40, 500);
  TrainRecipe t = train_recipe();
  t.steps = 20;
  t.eval_batches = 0;
  const auto data = make_pretrain_data({dir / "a", dir / "b"}, {3, 1}, data_recipe(), t, 1000, {0, 1});
  int64_t from_a = 0, from_b = 0;
  for (int64_t step = 0; step < t.steps; ++step) {
    const bb::PackedBatch b = data->train_batch(step);
    for (size_t s = 0; s < b.seq_lens.size(); ++s) (b.input_ids[s * 17] < 500 ? from_a : from_b) += 1;
  }
  EXPECT_EQ(from_a + from_b, 80);
  EXPECT_EQ(from_a, 60);
  EXPECT_TRUE(data->valid_batches().empty());
}

TEST(PretrainData, TokensOutsideTheVocabularyAreAnError) {
  bb::test::TempDir dir;
  write_dataset(dir / "a", 10, 40, 100);
  try {
    make_pretrain_data({dir / "a"}, {}, data_recipe(), train_recipe(), 50, {0, 1});
    FAIL() << "expected an error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.bin: sequence 0 holds token 100"), std::string::npos) << e.what();
  }
}

TEST(PretrainData, TooFewDocumentsForTheValidSplitIsAnError) {
  bb::test::TempDir dir;
  write_dataset(dir / "a", 2, 40, 100);
  DataRecipe d = data_recipe();
  d.train_fraction = 0.9;
  d.valid_fraction = 0.1;
  try {
    make_pretrain_data({dir / "a"}, {}, d, train_recipe(), 1000, {0, 1});
    FAIL() << "expected an error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few to give the valid split any"), std::string::npos) << e.what();
  }
}

}  // namespace
