// split_microbatches and prepare_microbatch: which sequences each microbatch
// gets, and the exact ids, shifted labels, loss mask, positions and padding a
// CausalLM receives.
#include "bumblebee/runtime/microbatch.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

using bb::PackedBatch;
using bb::PreparedMicroBatch;

namespace {

// Four sequences of lengths 3, 2, 4, 1; token ids say which sequence they are in.
PackedBatch four_sequences() {
  PackedBatch b;
  b.input_ids = {10, 11, 12, 20, 21, 30, 31, 32, 33, 40};
  b.seq_lens = {3, 2, 4, 1};
  return b;
}

std::vector<double> values(const bb::Tensor& t) { return t.to_doubles(); }

}  // namespace

TEST(SplitMicrobatches, WholeSequencesEarlierMicrobatchesTakeTheRemainder) {
  PackedBatch b = four_sequences();
  b.extras["advantages"] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // per token: cut with the tokens
  b.extras["scale"] = {0.5};                                 // not per token: every microbatch keeps it
  const auto mbs = bb::split_microbatches(b, 3);
  ASSERT_EQ(mbs.size(), 3u);
  EXPECT_EQ(mbs[0].seq_lens, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(mbs[0].input_ids, (std::vector<int64_t>{10, 11, 12, 20, 21}));
  EXPECT_EQ(mbs[1].seq_lens, (std::vector<int64_t>{4}));
  EXPECT_EQ(mbs[1].input_ids, (std::vector<int64_t>{30, 31, 32, 33}));
  EXPECT_EQ(mbs[2].seq_lens, (std::vector<int64_t>{1}));
  EXPECT_EQ(mbs[2].input_ids, (std::vector<int64_t>{40}));
  EXPECT_EQ(mbs[1].extras.at("advantages"), (std::vector<double>{6, 7, 8, 9}));
  EXPECT_EQ(mbs[2].extras.at("scale"), (std::vector<double>{0.5}));
  int64_t tokens = 0;
  for (const auto& mb : mbs) tokens += mb.total_tokens();
  EXPECT_EQ(tokens, b.total_tokens());
}

TEST(SplitMicrobatches, OneAndOnePerSequence) {
  const PackedBatch b = four_sequences();
  const auto whole = bb::split_microbatches(b, 1);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].input_ids, b.input_ids);
  EXPECT_EQ(whole[0].seq_lens, b.seq_lens);
  const auto each = bb::split_microbatches(b, 4);
  ASSERT_EQ(each.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(each[i].seq_lens, (std::vector<int64_t>{b.seq_lens[i]}));
}

TEST(SplitMicrobatches, MoreMicrobatchesThanSequencesIsAnError) {
  const PackedBatch b = four_sequences();
  try {
    bb::split_microbatches(b, 5);
    FAIL() << "5 microbatches of 4 sequences must fail";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_microbatches 5 exceeds the 4 sequences"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bb::split_microbatches(b, 0), bb::Error);
}

TEST(PrepareMicrobatch, ShiftsLabelsAndMaskWithinEachSequence) {
  PackedBatch mb;
  mb.input_ids = {10, 11, 12, 20, 21};
  mb.labels = {10, 11, 12, 20, 21};
  mb.loss_mask = {1, 1, 0.5, 1, 0};
  mb.seq_lens = {3, 2};
  const PreparedMicroBatch p = bb::prepare_microbatch(mb, 64, 1, bb::Device::cpu(), bb::DType::F64);
  EXPECT_EQ(p.real_tokens, 5);
  EXPECT_EQ(p.device.num_tokens, 5);
  EXPECT_EQ(values(p.device.input_ids), (std::vector<double>{10, 11, 12, 20, 21}));
  // Position t is scored on the token at t+1; a sequence's last position predicts nothing.
  EXPECT_EQ(values(p.device.labels), (std::vector<double>{11, 12, 0, 21, 0}));
  EXPECT_EQ(p.loss_mask, (std::vector<double>{1, 0.5, 0, 0, 0}));
  EXPECT_EQ(values(p.device_loss_mask), p.loss_mask);   // the same mask on the device, for the loss
  EXPECT_EQ(p.device_loss_mask.dtype(), bb::DType::F64);
  EXPECT_EQ(p.has_label, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(p.loss_tokens, 1.5);
  EXPECT_EQ(values(p.device.seq.position_ids), (std::vector<double>{0, 1, 2, 0, 1}));
  EXPECT_EQ(values(p.device.seq.cu_seqlens), (std::vector<double>{0, 3, 5}));
  EXPECT_EQ(p.device.seq.max_seqlen, 3);
}

TEST(PrepareMicrobatch, DefaultsScoreEveryNextToken) {
  PackedBatch mb;
  mb.input_ids = {5, 6, 7, 8};
  mb.seq_lens = {4};
  const PreparedMicroBatch p = bb::prepare_microbatch(mb, 16, 1, bb::Device::cpu(), bb::DType::F64);
  EXPECT_EQ(values(p.device.labels), (std::vector<double>{6, 7, 8, 0}));
  EXPECT_EQ(p.loss_mask, (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(p.loss_tokens, 3.0);
}

TEST(PrepareMicrobatch, PadsToTheTpMultipleWithOneMaskedSequence) {
  PackedBatch mb;
  mb.input_ids = {10, 11, 12, 20, 21};
  mb.seq_lens = {3, 2};
  mb.position_ids = {7, 8, 9, 3, 4};  // given positions are kept
  const PreparedMicroBatch p = bb::prepare_microbatch(mb, 64, 4, bb::Device::cpu(), bb::DType::F64);
  EXPECT_EQ(p.real_tokens, 5);
  EXPECT_EQ(p.device.num_tokens, 8);
  EXPECT_EQ(values(p.device.input_ids), (std::vector<double>{10, 11, 12, 20, 21, 0, 0, 0}));
  EXPECT_EQ(values(p.device.labels), (std::vector<double>{11, 12, 0, 21, 0, 0, 0, 0}));
  EXPECT_EQ(p.loss_mask, (std::vector<double>{1, 1, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(p.has_label, (std::vector<bool>{true, true, false, true, false, false, false, false}));
  EXPECT_EQ(p.loss_tokens, 3.0);
  EXPECT_EQ(values(p.device.seq.position_ids), (std::vector<double>{7, 8, 9, 3, 4, 0, 1, 2}));
  EXPECT_EQ(values(p.device.seq.cu_seqlens), (std::vector<double>{0, 3, 5, 8}));
  EXPECT_EQ(p.device.seq.max_seqlen, 3);
  // Already a multiple: no padding sequence.
  const PreparedMicroBatch q = bb::prepare_microbatch(mb, 64, 5, bb::Device::cpu(), bb::DType::F64);
  EXPECT_EQ(q.device.num_tokens, 5);
  EXPECT_EQ(values(q.device.seq.cu_seqlens), (std::vector<double>{0, 3, 5}));
}

TEST(PrepareMicrobatch, MaskedLabelsMayLieOutsideTheVocabulary) {
  PackedBatch mb;
  mb.input_ids = {1, 2, 3};
  mb.labels = {-100, -100, 3};  // the prompt's ignore index, never scored
  mb.loss_mask = {0, 0, 1};
  mb.seq_lens = {3};
  const PreparedMicroBatch p = bb::prepare_microbatch(mb, 8, 1, bb::Device::cpu(), bb::DType::F64);
  EXPECT_EQ(values(p.device.labels), (std::vector<double>{0, 3, 0}));
  EXPECT_EQ(p.loss_mask, (std::vector<double>{0, 1, 0}));
}

TEST(PrepareMicrobatch, BadInputsAreErrors) {
  PackedBatch mb;
  mb.input_ids = {1, 9, 3};
  mb.seq_lens = {3};
  EXPECT_THROW(bb::prepare_microbatch(mb, 8, 1, bb::Device::cpu(), bb::DType::F64), bb::Error);  // token 9 outside [0, 8)
  mb.input_ids = {1, 2, 3};
  mb.labels = {1, 2, 8};  // scored label outside the vocabulary
  EXPECT_THROW(bb::prepare_microbatch(mb, 8, 1, bb::Device::cpu(), bb::DType::F64), bb::Error);
  mb.labels = {1, 2};  // size disagrees with input_ids
  EXPECT_THROW(bb::prepare_microbatch(mb, 8, 1, bb::Device::cpu(), bb::DType::F64), bb::Error);
  mb.labels.clear();
  mb.seq_lens = {2};  // seq_lens do not cover the tokens
  EXPECT_THROW(bb::prepare_microbatch(mb, 8, 1, bb::Device::cpu(), bb::DType::F64), bb::Error);
  mb.seq_lens = {3};
  EXPECT_THROW(bb::prepare_microbatch(mb, 8, 0, bb::Device::cpu(), bb::DType::F64), bb::Error);  // pad multiple must be >= 1
}

TEST(ZigzagTokenOrder, RankRHoldsChunksRAndTheirMirror) {
  // Two sequences of lengths 8 and 4 over cp = 2: chunks of 2 and 1 tokens.
  const std::vector<int32_t> cu{0, 8, 12};
  EXPECT_EQ(bb::zigzag_token_order(cu, 2, 0), (std::vector<int64_t>{0, 1, 8, 6, 7, 11}));
  EXPECT_EQ(bb::zigzag_token_order(cu, 2, 1), (std::vector<int64_t>{2, 3, 9, 4, 5, 10}));
  // cp = 1: the halves of every sequence, the first halves first.
  EXPECT_EQ(bb::zigzag_token_order(cu, 1, 0), (std::vector<int64_t>{0, 1, 2, 3, 8, 9, 4, 5, 6, 7, 10, 11}));
  // Every token lands on exactly one rank.
  const std::vector<int32_t> cu4{0, 16, 24};
  std::vector<int> seen(24, 0);
  for (int r = 0; r < 4; ++r)
    for (int64_t t : bb::zigzag_token_order(cu4, 4, r)) ++seen[size_t(t)];
  EXPECT_EQ(seen, std::vector<int>(24, 1));
}

TEST(ZigzagTokenOrder, SequencesThatCannotBeSplitAreErrors) {
  try {
    bb::zigzag_token_order({0, 8, 14}, 2, 0);
    FAIL() << "a sequence of 6 tokens cannot be cut into 4 chunks";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1 of length 6 cannot be split into 2 x cp = 4"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bb::zigzag_token_order({0, 4}, 2, 2), bb::Error);   // rank outside cp
}

TEST(PrepareMicrobatch, ContextParallelPadsEachSequenceAndSplitsZigzag) {
  PackedBatch mb;
  mb.input_ids = {10, 11, 12, 20, 21, 22, 23, 24};
  mb.loss_mask = {1, 1, 1, 1, 1, 0.5, 1, 1};
  mb.seq_lens = {3, 5};   // padded to 4 and 8 for cp = 2: chunks of 1 and 2
  std::vector<double> all_mask;
  double microbatch_tokens = 0;
  for (int r = 0; r < 2; ++r) {
    const PreparedMicroBatch p = bb::prepare_microbatch(mb, 64, 1, bb::Device::cpu(), bb::DType::F64, {2, r});
    EXPECT_EQ(p.device.num_tokens, 6);
    EXPECT_EQ(p.real_tokens, 8);
    EXPECT_EQ(values(p.device.seq.cu_seqlens), (std::vector<double>{0, 1, 3}));
    EXPECT_EQ(p.device.seq.max_seqlen, 2);
    if (r == 0) {
      // Padded sequences: [10 11 12 _] [20 21 22 23 24 _ _ _]; rank 0 keeps chunks 0 and 3.
      EXPECT_EQ(values(p.device.input_ids), (std::vector<double>{10, 20, 21, 0, 0, 0}));
      EXPECT_EQ(values(p.device.labels), (std::vector<double>{11, 21, 22, 0, 0, 0}));
      EXPECT_EQ(values(p.device.seq.position_ids), (std::vector<double>{0, 0, 1, 3, 6, 7}));
      EXPECT_EQ(p.loss_mask, (std::vector<double>{1, 1, 0.5, 0, 0, 0}));
      EXPECT_EQ(p.has_label, (std::vector<bool>{true, true, true, false, false, false}));
    } else {
      EXPECT_EQ(values(p.device.input_ids), (std::vector<double>{11, 22, 23, 12, 24, 0}));
      EXPECT_EQ(values(p.device.labels), (std::vector<double>{12, 23, 24, 0, 0, 0}));
      EXPECT_EQ(values(p.device.seq.position_ids), (std::vector<double>{1, 2, 3, 2, 4, 5}));
      EXPECT_EQ(p.loss_mask, (std::vector<double>{1, 1, 1, 0, 0, 0}));
    }
    all_mask.push_back(p.loss_tokens);
    microbatch_tokens = p.microbatch_loss_tokens;
  }
  // The loss tokens of the two ranks add up to the microbatch's, counted once.
  EXPECT_EQ(all_mask[0] + all_mask[1], 5.5);
  EXPECT_EQ(microbatch_tokens, 5.5);
}

TEST(PrepareMicrobatch, ContextParallelWithTpPadsToTwiceCpTimesTp) {
  PackedBatch mb;
  mb.input_ids = {1, 2, 3, 4, 5};
  mb.seq_lens = {5};
  const PreparedMicroBatch p = bb::prepare_microbatch(mb, 8, 2, bb::Device::cpu(), bb::DType::F64, {2, 1});
  EXPECT_EQ(p.device.num_tokens, 4);   // 5 padded to 8 = 2 x cp x tp, a quarter per chunk pair
  EXPECT_EQ(values(p.device.input_ids), (std::vector<double>{3, 4, 5, 0}));
  EXPECT_EQ(values(p.device.seq.cu_seqlens), (std::vector<double>{0, 2}));
}
