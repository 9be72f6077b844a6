// Tests of the vocab-parallel embedding on the CPU: gather with vocab_start,
// shards summing to the full lookup, accumulating backward, and errors.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

Tensor ids_tensor(const std::vector<int64_t>& ids, DType dt) {
  std::vector<double> v(ids.begin(), ids.end());
  return Tensor::from_doubles(v, {int64_t(ids.size())}, dt);
}

TEST(OpsEmbedding, ForwardGathersRowsOfTheShard) {
  Generator gen(41);
  const int64_t vocab = 11, hidden = 5, start = 4, local = 6;  // this shard holds ids [4, 10)
  Tensor full = test::random_tensor(gen, {vocab, hidden});
  Tensor shard = full.narrow(start, local);
  const std::vector<int64_t> ids{4, 0, 9, 10, 5, 5, 3};
  for (DType idt : {DType::I32, DType::I64}) {
    Tensor out = Tensor::empty({7, hidden}, DType::F64);
    ops::embedding_forward(shard, ids_tensor(ids, idt), start, out);
    const std::vector<double> w = full.to_doubles(), o = out.to_doubles();
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool mine = ids[i] >= start && ids[i] < start + local;
      for (int64_t j = 0; j < hidden; ++j) {
        EXPECT_EQ(o[i * hidden + size_t(j)], mine ? w[size_t(ids[i] * hidden + j)] : 0.0) << "token " << i;
      }
    }
  }
}

TEST(OpsEmbedding, ShardsSumToTheFullLookup) {
  Generator gen(42);
  const int64_t vocab = 9, hidden = 3;
  Tensor full = test::random_tensor(gen, {vocab, hidden});
  Tensor ids = ids_tensor({8, 0, 4, 5, 2}, DType::I64);
  Tensor expected = Tensor::empty({5, hidden}, DType::F64);
  ops::embedding_forward(full, ids, 0, expected);
  Tensor lo = Tensor::empty({5, hidden}, DType::F64), hi = Tensor::empty({5, hidden}, DType::F64);
  ops::embedding_forward(full.narrow(0, 5), ids, 0, lo);
  ops::embedding_forward(full.narrow(5, 4), ids, 5, hi);
  ops::add_(lo, hi);
  EXPECT_EQ(lo.to_doubles(), expected.to_doubles());
}

TEST(OpsEmbedding, BackwardAccumulatesAndMatchesFiniteDifferences) {
  Generator gen(43);
  const int64_t local = 5, hidden = 4, start = 3;
  Tensor weight = test::random_tensor(gen, {local, hidden});
  Tensor ids = ids_tensor({3, 7, 7, 1, 5, 9, 3}, DType::I32);  // repeats, and ids outside [3, 8)
  const std::vector<double> proj = test::random_vector(gen, 7 * hidden);
  Tensor out = Tensor::empty({7, hidden}, DType::F64);
  auto loss = [&] {
    ops::embedding_forward(weight, ids, start, out);
    return test::project(out, proj);
  };
  const std::vector<double> numeric = test::numeric_gradient(loss, weight);

  Tensor grad_out = Tensor::from_doubles(proj, {7, hidden}, DType::F64);
  Tensor grad_weight = test::random_tensor(gen, {local, hidden});
  const std::vector<double> before = grad_weight.to_doubles();
  ops::embedding_backward(grad_out, ids, start, grad_weight);
  EXPECT_LT(test::relative_error(test::subtract(grad_weight.to_doubles(), before), numeric), 1e-6);
  // Row 1 (id 4) and row 3 (id 6) receive nothing.
  for (int64_t j = 0; j < hidden; ++j) {
    EXPECT_EQ(grad_weight.to_doubles()[size_t(1 * hidden + j)], before[size_t(1 * hidden + j)]);
    EXPECT_EQ(grad_weight.to_doubles()[size_t(3 * hidden + j)], before[size_t(3 * hidden + j)]);
  }
}

TEST(OpsEmbedding, Float32MatchesFloat64) {
  Generator gen(44);
  Tensor w64 = test::random_tensor(gen, {6, 3});
  Tensor ids = ids_tensor({5, 0, 2}, DType::I64);
  Tensor o64 = Tensor::empty({3, 3}, DType::F64), o32 = Tensor::empty({3, 3}, DType::F32);
  ops::embedding_forward(w64, ids, 0, o64);
  ops::embedding_forward(w64.to(DType::F32), ids, 0, o32);
  EXPECT_LT(test::relative_error(o32.to_doubles(), o64.to_doubles()), 1e-7);
}

TEST(OpsEmbedding, RejectsBadShapesAndDtypes) {
  Tensor w = Tensor::zeros({6, 3}, DType::F64);
  Tensor ids = ids_tensor({1, 2}, DType::I64);
  Tensor out_bad = Tensor::zeros({2, 4}, DType::F64);
  EXPECT_THROW(ops::embedding_forward(w, ids, 0, out_bad), Error);
  Tensor out = Tensor::zeros({2, 3}, DType::F64);
  EXPECT_THROW(ops::embedding_forward(w, ids.to(DType::F32), 0, out), Error);  // float ids
  EXPECT_THROW(ops::embedding_forward(w, ids.view({1, 2}), 0, out), Error);
  Tensor out32 = Tensor::zeros({2, 3}, DType::F32);
  EXPECT_THROW(ops::embedding_forward(w, ids, 0, out32), Error);
  Tensor gw_bad = Tensor::zeros({6, 2}, DType::F64);
  EXPECT_THROW(ops::embedding_backward(out, ids, 0, gw_bad), Error);
}

}  // namespace
}  // namespace bb
