// Tests of causal varlen grouped-query attention on the CPU: forward and lse
// against a naive masked softmax over the whole packed batch, backward against
// finite differences, for GQA, MHA and MQA head layouts, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

// Three packed sequences of lengths 5, 1 and 7.
const std::vector<double> kCuSeqlens{0, 5, 6, 13};
constexpr int64_t kTokens = 13, kMaxSeqlen = 7, kHeadDim = 5;

Tensor cu_seqlens() { return Tensor::from_doubles(kCuSeqlens, {4}, DType::I32); }

int64_t sequence_of(int64_t t) {
  int64_t s = 0;
  while (kCuSeqlens[size_t(s + 1)] <= double(t)) ++s;
  return s;
}

// Attention written over the full T x T score matrix with a mask: key j is
// visible to query i when both are in one sequence and j <= i.
void naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, std::vector<double>& out,
                     std::vector<double>& lse) {
  const std::vector<double> vq = q.to_doubles(), vk = k.to_doubles(), vv = v.to_doubles();
  const int64_t hq = q.size(1), hkv = k.size(1), d = q.size(2);
  out.assign(vq.size(), 0.0);
  lse.assign(size_t(kTokens * hq), 0.0);
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h * hkv / hq;
    for (int64_t i = 0; i < kTokens; ++i) {
      std::vector<double> p(size_t(kTokens), 0.0);
      double z = 0.0;
      for (int64_t j = 0; j < kTokens; ++j) {
        if (sequence_of(j) != sequence_of(i) || j > i) continue;
        double s = 0.0;
        for (int64_t c = 0; c < d; ++c) s += vq[size_t((i * hq + h) * d + c)] * vk[size_t((j * hkv + g) * d + c)];
        p[size_t(j)] = std::exp(scale * s);
        z += p[size_t(j)];
      }
      lse[size_t(i * hq + h)] = std::log(z);
      for (int64_t j = 0; j < kTokens; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          out[size_t((i * hq + h) * d + c)] += p[size_t(j)] / z * vv[size_t((j * hkv + g) * d + c)];
        }
      }
    }
  }
}

struct Heads {
  int64_t q, kv;
};
void PrintTo(const Heads& h, std::ostream* os) { *os << "Hq=" << h.q << " Hkv=" << h.kv; }

class OpsAttentionTest : public ::testing::TestWithParam<Heads> {};

TEST_P(OpsAttentionTest, ForwardMatchesNaive) {
  const Heads heads = GetParam();
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(81);
    Tensor q = test::random_tensor(gen, {kTokens, heads.q, kHeadDim}, dt);
    Tensor k = test::random_tensor(gen, {kTokens, heads.kv, kHeadDim}, dt);
    Tensor v = test::random_tensor(gen, {kTokens, heads.kv, kHeadDim}, dt);
    Tensor out = Tensor::empty(q.shape(), dt), lse = Tensor::empty({kTokens, heads.q}, dt);
    ops::attention_forward(q, k, v, cu_seqlens(), kMaxSeqlen, scale, out, lse);
    std::vector<double> e_out, e_lse;
    naive_attention(q, k, v, scale, e_out, e_lse);
    const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
    EXPECT_LT(test::relative_error(out.to_doubles(), e_out), tol) << dtype_name(dt);
    EXPECT_LT(test::relative_error(lse.to_doubles(), e_lse), tol) << dtype_name(dt);
  }
}

TEST_P(OpsAttentionTest, BackwardMatchesFiniteDifferences) {
  const Heads heads = GetParam();
  const double scale = 0.6;
  Generator gen(82);
  Tensor q = test::random_tensor(gen, {kTokens, heads.q, kHeadDim});
  Tensor k = test::random_tensor(gen, {kTokens, heads.kv, kHeadDim});
  Tensor v = test::random_tensor(gen, {kTokens, heads.kv, kHeadDim});
  const Tensor cu = cu_seqlens();
  const std::vector<double> proj = test::random_vector(gen, size_t(q.numel()));
  Tensor out = Tensor::empty(q.shape(), DType::F64), lse = Tensor::empty({kTokens, heads.q}, DType::F64);
  auto loss = [&] {
    ops::attention_forward(q, k, v, cu, kMaxSeqlen, scale, out, lse);
    return test::project(out, proj);
  };
  const std::vector<double> num_dq = test::numeric_gradient(loss, q);
  const std::vector<double> num_dk = test::numeric_gradient(loss, k);
  const std::vector<double> num_dv = test::numeric_gradient(loss, v);

  ops::attention_forward(q, k, v, cu, kMaxSeqlen, scale, out, lse);
  Tensor dout = Tensor::from_doubles(proj, q.shape(), DType::F64);
  Tensor dq = Tensor::empty(q.shape(), DType::F64);
  Tensor dk = Tensor::empty(k.shape(), DType::F64), dv = Tensor::empty(v.shape(), DType::F64);
  ops::attention_backward(dout, q, k, v, out, lse, cu, kMaxSeqlen, scale, dq, dk, dv);
  EXPECT_LT(test::relative_error(dq.to_doubles(), num_dq), 1e-6);
  EXPECT_LT(test::relative_error(dk.to_doubles(), num_dk), 1e-6);
  EXPECT_LT(test::relative_error(dv.to_doubles(), num_dv), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(HeadLayouts, OpsAttentionTest,
                         ::testing::Values(Heads{4, 2}, Heads{2, 2}, Heads{3, 1}),
                         [](const auto& info) {
                           return "q" + std::to_string(info.param.q) + "_kv" + std::to_string(info.param.kv);
                         });

TEST(OpsAttention, RejectsBadShapesAndOffsets) {
  const DType f = DType::F64;
  Tensor q = Tensor::zeros({kTokens, 4, 2}, f), k = Tensor::zeros({kTokens, 2, 2}, f),
         v = Tensor::zeros({kTokens, 2, 2}, f);
  Tensor out = Tensor::zeros(q.shape(), f), lse = Tensor::zeros({kTokens, 4}, f);
  const Tensor cu = cu_seqlens();
  EXPECT_NO_THROW(ops::attention_forward(q, k, v, cu, kMaxSeqlen, 1.0, out, lse));
  Tensor k3 = Tensor::zeros({kTokens, 3, 2}, f), v3 = Tensor::zeros({kTokens, 3, 2}, f);
  EXPECT_THROW(ops::attention_forward(q, k3, v3, cu, kMaxSeqlen, 1.0, out, lse), Error);  // 4 % 3
  Tensor v_short = Tensor::zeros({kTokens - 1, 2, 2}, f);
  EXPECT_THROW(ops::attention_forward(q, k, v_short, cu, kMaxSeqlen, 1.0, out, lse), Error);
  Tensor lse_bad = Tensor::zeros({kTokens, 2}, f);
  EXPECT_THROW(ops::attention_forward(q, k, v, cu, kMaxSeqlen, 1.0, out, lse_bad), Error);
  EXPECT_THROW(ops::attention_forward(q, k, v, cu, 6, 1.0, out, lse), Error);  // a sequence of 7 > 6
  EXPECT_THROW(ops::attention_forward(q, k, v, cu.to(DType::I64), kMaxSeqlen, 1.0, out, lse), Error);
  const Tensor short_end = Tensor::from_doubles({0, 5, 12}, {3}, DType::I32);
  EXPECT_THROW(ops::attention_forward(q, k, v, short_end, kMaxSeqlen, 1.0, out, lse), Error);
  const Tensor decreasing = Tensor::from_doubles({0, 6, 5, 13}, {4}, DType::I32);
  EXPECT_THROW(ops::attention_forward(q, k, v, decreasing, kMaxSeqlen, 1.0, out, lse), Error);
  const Tensor no_zero = Tensor::from_doubles({1, 13}, {2}, DType::I32);
  EXPECT_THROW(ops::attention_forward(q, k, v, no_zero, kMaxSeqlen, 1.0, out, lse), Error);
  Tensor dq = Tensor::zeros(q.shape(), f), dk = Tensor::zeros(k.shape(), f), dv_bad = Tensor::zeros(q.shape(), f);
  EXPECT_THROW(ops::attention_backward(out, q, k, v, out, lse, cu, kMaxSeqlen, 1.0, dq, dk, dv_bad), Error);
}

}  // namespace
}  // namespace bb
