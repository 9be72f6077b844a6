// SFT packing: exact ids, labels, masks and sequence boundaries of greedy in-order packing.
#include "bumblebee/data/sft_packing.h"

#include <gtest/gtest.h>

#include "data_test_support.h"

TEST(SftPacking, MasksResponsesAndPacksGreedily) {
  const std::vector<bb::Conversation> convs = {
      {{{1, 2}, {3, 4}}},                       // 4 tokens
      {{{5}, {6}}, {{7}, {8, 9}}},              // 5 tokens, two turns
      {{{10, 11, 12}, {13}}},                   // 4 tokens: would make 13 > 9, starts batch 2
  };
  const bb::SftPacking p = bb::pack_conversations(convs, 9);
  ASSERT_EQ(p.batches.size(), 2u);
  const bb::PackedBatch& b = p.batches[0];
  EXPECT_EQ(b.input_ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(b.labels, b.input_ids);
  EXPECT_EQ(b.loss_mask, (std::vector<float>{0, 0, 1, 1, 0, 1, 0, 1, 1}));
  EXPECT_EQ(b.seq_lens, (std::vector<int64_t>{4, 5}));
  EXPECT_NO_THROW(b.validate());
  EXPECT_EQ(p.batches[1].input_ids, (std::vector<int64_t>{10, 11, 12, 13}));
  EXPECT_EQ(p.batches[1].loss_mask, (std::vector<float>{0, 0, 0, 1}));
  EXPECT_EQ(p.truncated_conversations, 0);
}

TEST(SftPacking, TruncatesOverlongAndSkipsEmpty) {
  std::vector<int64_t> prompt(6, 1), response(6, 2);
  const std::vector<bb::Conversation> convs = {{{prompt, response}}, {}, {{{}, {}}}, {{{3}, {4}}}};
  const bb::SftPacking p = bb::pack_conversations(convs, 8);
  EXPECT_EQ(p.truncated_conversations, 1);
  EXPECT_EQ(p.skipped_empty_conversations, 2);
  ASSERT_EQ(p.batches.size(), 2u);
  EXPECT_EQ(p.batches[0].seq_lens, std::vector<int64_t>{8});
  EXPECT_EQ(p.batches[0].loss_mask, (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(p.batches[1].input_ids, (std::vector<int64_t>{3, 4}));
  EXPECT_NE(bb::test::error_message([&] { bb::pack_conversations(convs, 0); }).find("must be positive"),
            std::string::npos);
}
