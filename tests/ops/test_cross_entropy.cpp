// Tests of the vocab-parallel cross entropy pieces on the CPU: one shard
// against a naive log-softmax, two shards combined equal to one, the one-pass
// statistics equal to the two passes bit for bit, backward against finite
// differences (also per shard and in place), and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

constexpr int64_t kRows = 6, kVocab = 11;
const std::vector<double> kLabels{3, 10, 0, 7, -100, 5};  // row 4 is masked

Tensor labels(DType dt = DType::I64) { return Tensor::from_doubles(kLabels, {kRows}, dt); }

struct Stats {
  Tensor row_max, sumexp, target, lse, loss;
  explicit Stats(DType dt)
      : row_max(Tensor::empty({kRows}, dt)), sumexp(Tensor::empty({kRows}, dt)), target(Tensor::empty({kRows}, dt)),
        lse(Tensor::empty({kRows}, dt)), loss(Tensor::empty({kRows}, dt)) {}
};

// The single-rank pipeline: max, sumexp and target, then lse and loss.
Stats unsplit_loss(const Tensor& logits, const Tensor& lab) {
  Stats s(logits.dtype());
  ops::logits_row_max(logits, s.row_max);
  ops::logits_sumexp_target(logits, s.row_max, lab, 0, s.sumexp, s.target);
  ops::cross_entropy_loss(s.row_max, s.sumexp, s.target, s.lse, s.loss);
  return s;
}

std::vector<double> naive_loss(const Tensor& logits, std::vector<double>& lse) {
  const std::vector<double> l = logits.to_doubles();
  std::vector<double> loss(static_cast<size_t>(kRows));
  lse.assign(size_t(kRows), 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    double z = 0.0;
    for (int64_t j = 0; j < kVocab; ++j) z += std::exp(l[size_t(r * kVocab + j)]);
    lse[size_t(r)] = std::log(z);
    const int64_t label = int64_t(kLabels[size_t(r)]);
    const double target = label >= 0 ? l[size_t(r * kVocab + label)] : 0.0;
    loss[size_t(r)] = lse[size_t(r)] - target;
  }
  return loss;
}

TEST(OpsCrossEntropy, OneShardMatchesNaive) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(91);
    Tensor logits = test::random_tensor(gen, {kRows, kVocab}, dt, 2.0);
    const Stats s = unsplit_loss(logits, labels(DType::I32));
    std::vector<double> e_lse;
    const std::vector<double> e_loss = naive_loss(logits, e_lse);
    const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
    EXPECT_LT(test::relative_error(s.lse.to_doubles(), e_lse), tol) << dtype_name(dt);
    EXPECT_LT(test::relative_error(s.loss.to_doubles(), e_loss), tol) << dtype_name(dt);
    EXPECT_EQ(s.target.to_doubles()[4], 0.0);  // the masked row has no target anywhere
  }
}

TEST(OpsCrossEntropy, TwoShardsCombineToTheUnsplitResult) {
  Generator gen(92);
  Tensor logits = test::random_tensor(gen, {kRows, kVocab}, DType::F64, 3.0);
  const Stats full = unsplit_loss(logits, labels());
  // Shards hold columns [0, 6) and [6, 11); copy them out as a TP rank would own them.
  const std::vector<double> l = logits.to_doubles();
  std::vector<Tensor> shards;
  for (auto [start, width] : {std::pair<int64_t, int64_t>{0, 6}, {6, 5}}) {
    std::vector<double> cols;
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = 0; j < width; ++j) cols.push_back(l[size_t(r * kVocab + start + j)]);
    }
    shards.push_back(Tensor::from_doubles(cols, {kRows, width}, DType::F64));
  }
  const int64_t starts[2] = {0, 6};
  Stats part[2] = {Stats(DType::F64), Stats(DType::F64)};
  for (int rank = 0; rank < 2; ++rank) ops::logits_row_max(shards[size_t(rank)], part[rank].row_max);
  // The all-reduce(max) of the row maxima, then each rank's sumexp against it.
  std::vector<double> global_max(static_cast<size_t>(kRows));
  for (int64_t r = 0; r < kRows; ++r) {
    global_max[size_t(r)] = std::max(part[0].row_max.to_doubles()[size_t(r)], part[1].row_max.to_doubles()[size_t(r)]);
  }
  Tensor row_max = Tensor::from_doubles(global_max, {kRows}, DType::F64);
  for (int rank = 0; rank < 2; ++rank) {
    ops::logits_sumexp_target(shards[size_t(rank)], row_max, labels(), starts[rank], part[rank].sumexp,
                              part[rank].target);
  }
  // The all-reduce(sum) of sumexp and target_logit.
  ops::add_(part[0].sumexp, part[1].sumexp);
  ops::add_(part[0].target, part[1].target);
  Stats combined(DType::F64);
  ops::cross_entropy_loss(row_max, part[0].sumexp, part[0].target, combined.lse, combined.loss);
  EXPECT_LT(test::relative_error(combined.loss.to_doubles(), full.loss.to_doubles()), 1e-14);
  EXPECT_LT(test::relative_error(combined.lse.to_doubles(), full.lse.to_doubles()), 1e-14);

  // Backward per shard: each rank's dlogits are its columns of the full dlogits.
  Generator dgen(93);
  Tensor dloss = test::random_tensor(dgen, {kRows});
  Tensor dfull = Tensor::empty({kRows, kVocab}, DType::F64);
  ops::cross_entropy_backward(logits, labels(), 0, full.lse, dloss, dfull);
  const std::vector<double> df = dfull.to_doubles();
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t width = shards[size_t(rank)].size(1);
    Tensor dshard = Tensor::empty({kRows, width}, DType::F64);
    ops::cross_entropy_backward(shards[size_t(rank)], labels(), starts[rank], combined.lse, dloss, dshard);
    const std::vector<double> ds = dshard.to_doubles();
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = 0; j < width; ++j) {
        EXPECT_NEAR(ds[size_t(r * width + j)], df[size_t(r * kVocab + starts[rank] + j)], 1e-13);
      }
    }
  }
}

// logits_softmax_stats is the two passes in sequence on the CPU: the same
// bits, for a whole vocabulary and for a shard whose labels fall partly
// outside it (or are masked), with int32 and int64 labels.
TEST(OpsCrossEntropy, SoftmaxStatsEqualTheTwoPassesBitForBit) {
  for (DType dt : {DType::F64, DType::F32}) {
    for (DType label_dt : {DType::I64, DType::I32}) {
      for (int64_t vocab_start : {int64_t(0), int64_t(4)}) {
        Generator gen(95);
        Tensor logits = test::random_tensor(gen, {kRows, kVocab}, dt, 3.0);
        const Tensor lab = labels(label_dt);
        Stats two(dt), one(dt);
        ops::logits_row_max(logits, two.row_max);
        ops::logits_sumexp_target(logits, two.row_max, lab, vocab_start, two.sumexp, two.target);
        ops::logits_softmax_stats(logits, lab, vocab_start, one.row_max, one.sumexp, one.target);
        const std::string where = std::string(dtype_name(dt)) + " labels " + dtype_name(label_dt) +
                                  " vocab_start " + std::to_string(vocab_start);
        EXPECT_EQ(one.row_max.to_doubles(), two.row_max.to_doubles()) << where;
        EXPECT_EQ(one.sumexp.to_doubles(), two.sumexp.to_doubles()) << where;
        EXPECT_EQ(one.target.to_doubles(), two.target.to_doubles()) << where;
        if (vocab_start > 0) EXPECT_EQ(one.target.to_doubles()[0], 0.0) << where;  // label 3 lies below the shard
      }
    }
  }
}

TEST(OpsCrossEntropy, BackwardMatchesFiniteDifferences) {
  Generator gen(94);
  Tensor logits = test::random_tensor(gen, {kRows, kVocab});
  const std::vector<double> dloss = test::random_vector(gen, size_t(kRows));
  const Tensor lab = labels();
  auto loss = [&] { return test::project(unsplit_loss(logits, lab).loss, dloss); };
  const std::vector<double> numeric = test::numeric_gradient(loss, logits);

  const Stats s = unsplit_loss(logits, lab);
  Tensor dloss_t = Tensor::from_doubles(dloss, {kRows}, DType::F64);
  Tensor dlogits = Tensor::empty({kRows, kVocab}, DType::F64);
  ops::cross_entropy_backward(logits, lab, 0, s.lse, dloss_t, dlogits);
  EXPECT_LT(test::relative_error(dlogits.to_doubles(), numeric), 1e-6);

  // dlogits may alias logits.
  ops::cross_entropy_backward(logits, lab, 0, s.lse, dloss_t, logits);
  EXPECT_EQ(logits.to_doubles(), dlogits.to_doubles());
}

TEST(OpsCrossEntropy, RejectsBadShapesAndDtypes) {
  Tensor logits = Tensor::zeros({kRows, kVocab}, DType::F64);
  Tensor row_max = Tensor::zeros({kRows}, DType::F64), bad = Tensor::zeros({kRows + 1}, DType::F64);
  EXPECT_THROW(ops::logits_row_max(logits, bad), Error);
  Tensor sumexp = Tensor::zeros({kRows}, DType::F64), target = Tensor::zeros({kRows}, DType::F64);
  EXPECT_THROW(ops::logits_sumexp_target(logits, row_max, labels(DType::F64), 0, sumexp, target), Error);
  EXPECT_THROW(ops::logits_sumexp_target(logits, bad, labels(), 0, sumexp, target), Error);
  Tensor target32 = Tensor::zeros({kRows}, DType::F32);
  EXPECT_THROW(ops::logits_sumexp_target(logits, row_max, labels(), 0, sumexp, target32), Error);
  EXPECT_THROW(ops::logits_softmax_stats(logits, labels(DType::F64), 0, row_max, sumexp, target), Error);
  EXPECT_THROW(ops::logits_softmax_stats(logits, labels(), 0, bad, sumexp, target), Error);
  EXPECT_THROW(ops::logits_softmax_stats(logits, labels(), 0, row_max, sumexp, target32), Error);
  Tensor dlogits_bad = Tensor::zeros({kRows, kVocab - 1}, DType::F64);
  EXPECT_THROW(ops::cross_entropy_backward(logits, labels(), 0, row_max, row_max, dlogits_bad), Error);
  Tensor lse = Tensor::zeros({kRows}, DType::F64);
  EXPECT_THROW(ops::cross_entropy_loss(row_max, sumexp, bad, lse, target), Error);
}

}  // namespace
}  // namespace bb
