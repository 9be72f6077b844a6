// Tests of the vocab-parallel entropy pieces on the CPU: one shard against a
// direct -sum p log p, two shards (partial sums added as the tp all-reduce
// does) equal to one, and the joint cross-entropy + entropy backward against
// float64 finite differences, also per shard and in place.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

constexpr int64_t kRows = 5, kVocab = 9;
const std::vector<double> kLabels{2, 8, -100, 0, 4};   // row 2 is masked

Tensor labels() { return Tensor::from_doubles(kLabels, {kRows}, DType::I64); }
Tensor rows() { return Tensor::empty({kRows}, DType::F64); }

// lse, loss and entropy of logits whose columns are split at `split` into two
// shards, each shard's statistics summed like the tp reductions do.
struct Split {
  Tensor lse = rows(), loss = rows(), entropy = rows();
};
Split entropy_over_shards(const Tensor& logits, int64_t split) {
  const std::vector<double> l = logits.to_doubles();
  std::vector<Tensor> shards;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, split}, {split, kVocab}}) {
    std::vector<double> part;
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t j = begin; j < end; ++j) part.push_back(l[size_t(r * kVocab + j)]);
    shards.push_back(Tensor::from_doubles(part, {kRows, end - begin}, DType::F64));
  }
  const int64_t starts[2] = {0, split};
  std::vector<double> m(kRows, -INFINITY), s(kRows, 0.0), t(kRows, 0.0), z(kRows, 0.0);
  for (const Tensor& shard : shards) {
    Tensor mx = rows();
    ops::logits_row_max(shard, mx);
    const std::vector<double> v = mx.to_doubles();
    for (int64_t r = 0; r < kRows; ++r) m[size_t(r)] = std::max(m[size_t(r)], v[size_t(r)]);
  }
  const Tensor row_max = Tensor::from_doubles(m, {kRows}, DType::F64);
  for (int k = 0; k < 2; ++k) {
    Tensor se = rows(), tg = rows(), zs = rows();
    ops::logits_sumexp_target(shards[size_t(k)], row_max, labels(), starts[k], se, tg);
    ops::logits_zexp_sum(shards[size_t(k)], row_max, zs);
    const std::vector<double> a = se.to_doubles(), b = tg.to_doubles(), c = zs.to_doubles();
    for (int64_t r = 0; r < kRows; ++r) {
      s[size_t(r)] += a[size_t(r)];
      t[size_t(r)] += b[size_t(r)];
      z[size_t(r)] += c[size_t(r)];
    }
  }
  Split out;
  const Tensor sumexp = Tensor::from_doubles(s, {kRows}, DType::F64);
  ops::cross_entropy_loss(row_max, sumexp, Tensor::from_doubles(t, {kRows}, DType::F64), out.lse, out.loss);
  ops::entropy_from_sums(out.lse, sumexp, Tensor::from_doubles(z, {kRows}, DType::F64), out.entropy);
  return out;
}

std::vector<double> direct_entropy(const Tensor& logits) {
  const std::vector<double> l = logits.to_doubles();
  std::vector<double> h(kRows, 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    double norm = 0.0;
    for (int64_t j = 0; j < kVocab; ++j) norm += std::exp(l[size_t(r * kVocab + j)]);
    for (int64_t j = 0; j < kVocab; ++j) {
      const double p = std::exp(l[size_t(r * kVocab + j)]) / norm;
      h[size_t(r)] -= p * std::log(p);
    }
  }
  return h;
}

TEST(OpsEntropy, ShardsMatchDirectSoftmaxEntropy) {
  Generator gen(5);
  const Tensor logits = test::random_tensor(gen, {kRows, kVocab}, DType::F64, 2.0);
  const std::vector<double> expected = direct_entropy(logits);
  for (int64_t split : {kVocab, int64_t(4)}) {
    const Split s = entropy_over_shards(logits, split);
    EXPECT_LT(test::relative_error(s.entropy.to_doubles(), expected), 1e-13) << "split " << split;
  }
}

TEST(OpsEntropy, JointBackwardMatchesFiniteDifferences) {
  Generator gen(17);
  Tensor logits = test::random_tensor(gen, {kRows, kVocab}, DType::F64, 1.5);
  const std::vector<double> wl = test::random_vector(gen, kRows), we = test::random_vector(gen, kRows);
  const auto objective = [&] {
    const Split s = entropy_over_shards(logits, 4);
    return test::project(s.loss, wl) + test::project(s.entropy, we);
  };
  const std::vector<double> numeric = test::numeric_gradient(objective, logits);
  const Split s = entropy_over_shards(logits, kVocab);
  const Tensor dloss = Tensor::from_doubles(wl, {kRows}, DType::F64), dent = Tensor::from_doubles(we, {kRows}, DType::F64);
  Tensor dlogits = Tensor::empty({kRows, kVocab}, DType::F64);
  ops::cross_entropy_entropy_backward(logits, labels(), 0, s.lse, s.entropy, dloss, dent, dlogits);
  EXPECT_LT(test::relative_error(dlogits.to_doubles(), numeric), 1e-8);

  // Per shard with the combined statistics, and in place, gives the same columns.
  const std::vector<double> full = dlogits.to_doubles();
  const std::vector<double> l = logits.to_doubles();
  std::vector<double> part;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 4; j < kVocab; ++j) part.push_back(l[size_t(r * kVocab + j)]);
  Tensor shard = Tensor::from_doubles(part, {kRows, kVocab - 4}, DType::F64);
  ops::cross_entropy_entropy_backward(shard, labels(), 4, s.lse, s.entropy, dloss, dent, shard);
  const std::vector<double> got = shard.to_doubles();
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 4; j < kVocab; ++j)
      EXPECT_NEAR(got[size_t(r * (kVocab - 4) + j - 4)], full[size_t(r * kVocab + j)], 1e-15);
}

TEST(OpsEntropy, ZeroEntropyGradientIsTheCrossEntropyBackward) {
  Generator gen(3);
  const Tensor logits = test::random_tensor(gen, {kRows, kVocab}, DType::F32, 2.0);
  Tensor row_max = Tensor::empty({kRows}, DType::F32), sumexp = Tensor::empty({kRows}, DType::F32),
         target = Tensor::empty({kRows}, DType::F32), zexp = Tensor::empty({kRows}, DType::F32),
         lse = Tensor::empty({kRows}, DType::F32), loss = Tensor::empty({kRows}, DType::F32),
         entropy = Tensor::empty({kRows}, DType::F32);
  ops::logits_row_max(logits, row_max);
  ops::logits_sumexp_target(logits, row_max, labels(), 0, sumexp, target);
  ops::logits_zexp_sum(logits, row_max, zexp);
  ops::cross_entropy_loss(row_max, sumexp, target, lse, loss);
  ops::entropy_from_sums(lse, sumexp, zexp, entropy);
  const Tensor dloss = test::random_tensor(gen, {kRows}, DType::F32), zero = Tensor::zeros({kRows}, DType::F32);
  Tensor a = Tensor::empty({kRows, kVocab}, DType::F32), b = Tensor::empty({kRows, kVocab}, DType::F32);
  ops::cross_entropy_backward(logits, labels(), 0, lse, dloss, a);
  ops::cross_entropy_entropy_backward(logits, labels(), 0, lse, entropy, dloss, zero, b);
  EXPECT_EQ(a.to_doubles(), b.to_doubles());
  EXPECT_THROW(ops::cross_entropy_entropy_backward(logits, labels(), 0, lse, row_max.narrow(0, 2), dloss, zero, b),
               Error);
}

}  // namespace
}  // namespace bb
