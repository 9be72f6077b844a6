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
