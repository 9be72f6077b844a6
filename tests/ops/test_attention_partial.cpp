// Tests of partial attention (separate q / kv sequence ranges, causal with
// the bottom-right diagonal or no mask) on the CPU, against a naive softmax,
// its backward against float64 finite differences, and the log-sum-exp merge:
// attention over keys split in two parts, merged, equals attention over all.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

constexpr int64_t kHeadsQ = 4, kHeadsKv = 2, kHeadDim = 3;

// Two sequences: 3 queries against 5 keys, 4 queries against 2 keys.
const std::vector<int32_t> kCuQ{0, 3, 7}, kCuKv{0, 5, 7};

ops::AttentionSpans spans(ops::AttentionMask mask) {
  return {Tensor::from_vector(kCuQ, {3}), Tensor::from_vector(kCuKv, {3}), 4, 5, mask};
}

// Key j of sequence s is visible to query i when unmasked or j - kv_begin <= i - q_begin + Lkv - Lq.
void naive(const Tensor& q, const Tensor& k, const Tensor& v, double scale, ops::AttentionMask mask,
           std::vector<double>& out, std::vector<double>& lse) {
  const std::vector<double> vq = q.to_doubles(), vk = k.to_doubles(), vv = v.to_doubles();
  out.assign(vq.size(), 0.0);
  lse.assign(size_t(q.size(0) * kHeadsQ), -std::numeric_limits<double>::infinity());
  for (size_t s = 0; s + 1 < kCuQ.size(); ++s) {
    const int64_t lq = kCuQ[s + 1] - kCuQ[s], lkv = kCuKv[s + 1] - kCuKv[s];
    for (int64_t h = 0; h < kHeadsQ; ++h) {
      const int64_t g = h / (kHeadsQ / kHeadsKv);
      for (int64_t i = 0; i < lq; ++i) {
        std::vector<double> p(size_t(lkv), 0.0);
        double z = 0.0;
        for (int64_t j = 0; j < lkv; ++j) {
          if (mask == ops::AttentionMask::Causal && j > i + lkv - lq) continue;
          double sc = 0.0;
          for (int64_t c = 0; c < kHeadDim; ++c)
            sc += vq[size_t(((kCuQ[s] + i) * kHeadsQ + h) * kHeadDim + c)] *
                  vk[size_t(((kCuKv[s] + j) * kHeadsKv + g) * kHeadDim + c)];
          p[size_t(j)] = std::exp(scale * sc);
          z += p[size_t(j)];
        }
        if (z == 0.0) continue;
        lse[size_t((kCuQ[s] + i) * kHeadsQ + h)] = std::log(z);
        for (int64_t j = 0; j < lkv; ++j)
          for (int64_t c = 0; c < kHeadDim; ++c)
            out[size_t(((kCuQ[s] + i) * kHeadsQ + h) * kHeadDim + c)] +=
                p[size_t(j)] / z * vv[size_t(((kCuKv[s] + j) * kHeadsKv + g) * kHeadDim + c)];
      }
    }
  }
}

TEST(OpsAttentionPartial, ForwardMatchesNaiveForBothMasks) {
  Generator gen(91);
  Tensor q = test::random_tensor(gen, {7, kHeadsQ, kHeadDim});
  Tensor k = test::random_tensor(gen, {7, kHeadsKv, kHeadDim}), v = test::random_tensor(gen, {7, kHeadsKv, kHeadDim});
  for (ops::AttentionMask mask : {ops::AttentionMask::Causal, ops::AttentionMask::None}) {
    Tensor out = Tensor::empty(q.shape(), DType::F64), lse = Tensor::empty({7, kHeadsQ}, DType::F64);
    ops::attention_forward(q, k, v, spans(mask), 0.7, out, lse);
    std::vector<double> e_out, e_lse;
    naive(q, k, v, 0.7, mask, e_out, e_lse);
    EXPECT_LT(test::relative_error(out.to_doubles(), e_out), 1e-13) << ops::attention_mask_name(mask);
    const std::vector<double> got = lse.to_doubles();
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isinf(e_lse[i])) {
        EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "row " << i;   // sees no key: lse -inf, out 0
      } else {
        EXPECT_NEAR(got[i], e_lse[i], 1e-13) << "row " << i;
      }
    }
  }
}

TEST(OpsAttentionPartial, BackwardMatchesFiniteDifferences) {
  for (ops::AttentionMask mask : {ops::AttentionMask::Causal, ops::AttentionMask::None}) {
    Generator gen(92);
    Tensor q = test::random_tensor(gen, {7, kHeadsQ, kHeadDim});
    Tensor k = test::random_tensor(gen, {7, kHeadsKv, kHeadDim});
    Tensor v = test::random_tensor(gen, {7, kHeadsKv, kHeadDim});
    const std::vector<double> proj = test::random_vector(gen, size_t(q.numel()));
    Tensor out = Tensor::empty(q.shape(), DType::F64), lse = Tensor::empty({7, kHeadsQ}, DType::F64);
    auto loss = [&] {
      ops::attention_forward(q, k, v, spans(mask), 0.6, out, lse);
      return test::project(out, proj);
    };
    const std::vector<double> num_dq = test::numeric_gradient(loss, q);
    const std::vector<double> num_dk = test::numeric_gradient(loss, k);
    const std::vector<double> num_dv = test::numeric_gradient(loss, v);
    ops::attention_forward(q, k, v, spans(mask), 0.6, out, lse);
    Tensor dout = Tensor::from_doubles(proj, q.shape(), DType::F64);
    Tensor dq = Tensor::empty(q.shape(), DType::F64), dk = Tensor::empty(k.shape(), DType::F64),
           dv = Tensor::empty(v.shape(), DType::F64);
    ops::attention_backward(dout, q, k, v, out, lse, spans(mask), 0.6, dq, dk, dv);
    const char* m = ops::attention_mask_name(mask);
    EXPECT_LT(test::relative_error(dq.to_doubles(), num_dq), 1e-6) << m;
    EXPECT_LT(test::relative_error(dk.to_doubles(), num_dk), 1e-6) << m;
    EXPECT_LT(test::relative_error(dv.to_doubles(), num_dv), 1e-6) << m;
  }
}

// Queries 2..5 of a causal sequence of 6: their attention over all 6 keys
// is the merge of keys 0..1 (no mask) and keys 2..5 (causal, same length),
// and also one causal call of 4 queries against 6 keys (bottom-right diagonal).
TEST(OpsAttentionPartial, MergeOfKeyPartsEqualsTheWhole) {
  Generator gen(93);
  Tensor q = test::random_tensor(gen, {6, 2, kHeadDim});
  Tensor k = test::random_tensor(gen, {6, 1, kHeadDim}), v = test::random_tensor(gen, {6, 1, kHeadDim});
  auto cu = [](int32_t n) { return Tensor::from_vector(std::vector<int32_t>{0, n}, {2}); };
  Tensor whole = Tensor::empty(q.shape(), DType::F64), whole_lse = Tensor::empty({6, 2}, DType::F64);
  ops::attention_forward(q, k, v, cu(6), 6, 0.5, whole, whole_lse);
  const std::vector<double> want = whole.narrow(2, 4).to_doubles(), want_lse = whole_lse.narrow(2, 4).to_doubles();

  const Tensor q4 = q.narrow(2, 4);
  Tensor out = Tensor::empty(q4.shape(), DType::F64), lse = Tensor::empty({4, 2}, DType::F64);
  ops::attention_forward(q4, k.narrow(2, 4), v.narrow(2, 4), {cu(4), cu(4), 4, 4, ops::AttentionMask::Causal}, 0.5,
                         out, lse);
  Tensor part = Tensor::empty(q4.shape(), DType::F64), part_lse = Tensor::empty({4, 2}, DType::F64);
  ops::attention_forward(q4, k.narrow(0, 2), v.narrow(0, 2), {cu(4), cu(2), 4, 2, ops::AttentionMask::None}, 0.5,
                         part, part_lse);
  ops::attention_merge(out, lse, part, part_lse);
  EXPECT_LT(test::relative_error(out.to_doubles(), want), 1e-14);
  EXPECT_LT(test::relative_error(lse.to_doubles(), want_lse), 1e-14);

  ops::attention_forward(q4, k, v, {cu(4), cu(6), 4, 6, ops::AttentionMask::Causal}, 0.5, out, lse);
  EXPECT_LT(test::relative_error(out.to_doubles(), want), 1e-14);
  EXPECT_LT(test::relative_error(lse.to_doubles(), want_lse), 1e-14);
}

TEST(OpsAttentionPartial, RejectsDisagreeingSpans) {
  Tensor q = Tensor::zeros({7, kHeadsQ, kHeadDim}, DType::F64), k = Tensor::zeros({7, kHeadsKv, kHeadDim}, DType::F64);
  Tensor out = Tensor::zeros(q.shape(), DType::F64), lse = Tensor::zeros({7, kHeadsQ}, DType::F64);
  ops::AttentionSpans s = spans(ops::AttentionMask::None);
  s.cu_seqlens_kv = Tensor::from_vector(std::vector<int32_t>{0, 7}, {2});
  try {
    ops::attention_forward(q, k, k, s, 1.0, out, lse);
    FAIL() << "2 query sequences against 1 kv sequence must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens_q has 2 sequences but cu_seqlens_kv 1"), std::string::npos)
        << e.what();
  }
  s = spans(ops::AttentionMask::None);
  s.max_seqlen_kv = 2;   // the first kv sequence has 5 keys
  EXPECT_THROW(ops::attention_forward(q, k, k, s, 1.0, out, lse), Error);
}

}  // namespace
}  // namespace bb
