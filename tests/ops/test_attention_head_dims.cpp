// Tests of attention whose v head dim differs from the q/k head dim (multi-head
// latent attention, DeepSeek-V3) on the CPU: forward against a naive softmax,
// backward against float64 finite differences, for the packed cu_seqlens form
// and the spans form of ring attention (both masks), GQA and MHA head layouts,
// Dv smaller and larger than Dqk, the merge of partials, and shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "bumblebee/ops/ops.h"
#include "op_error.h"
#include "finite_difference.h"

namespace bb {
namespace {

using test::error_of;

// Two sequences: 3 queries against 5 keys, 4 queries against 2 keys (spans
// form); the packed self-attention form uses the key offsets for both.
const std::vector<int32_t> kCuQ{0, 3, 7}, kCuKv{0, 5, 7};

struct Case {
  int64_t heads_q, heads_kv, dim_qk, dim_v;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << "Hq=" << c.heads_q << " Hkv=" << c.heads_kv << " Dqk=" << c.dim_qk << " Dv=" << c.dim_v;
}

// Key j of sequence s is visible to query i when unmasked or j - kv_begin <= i - q_begin + Lkv - Lq.
void naive(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& cq,
           const std::vector<int32_t>& ckv, ops::AttentionMask mask, double scale, std::vector<double>& out,
           std::vector<double>& lse) {
  const std::vector<double> vq = q.to_doubles(), vk = k.to_doubles(), vv = v.to_doubles();
  const int64_t hq = q.size(1), hkv = k.size(1), dqk = q.size(2), dv = v.size(2);
  out.assign(size_t(q.size(0) * hq * dv), 0.0);
  lse.assign(size_t(q.size(0) * hq), -std::numeric_limits<double>::infinity());
  for (size_t s = 0; s + 1 < cq.size(); ++s) {
    const int64_t lq = cq[s + 1] - cq[s], lkv = ckv[s + 1] - ckv[s];
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      for (int64_t i = 0; i < lq; ++i) {
        const int64_t row = (cq[s] + i) * hq + h;
        std::vector<double> p(size_t(lkv), 0.0);
        double z = 0.0;
        for (int64_t j = 0; j < lkv; ++j) {
          if (mask == ops::AttentionMask::Causal && j > i + lkv - lq) continue;
          double sc = 0.0;
          for (int64_t c = 0; c < dqk; ++c)
            sc += vq[size_t(row * dqk + c)] * vk[size_t(((ckv[s] + j) * hkv + g) * dqk + c)];
          p[size_t(j)] = std::exp(scale * sc);
          z += p[size_t(j)];
        }
        if (z == 0.0) continue;
        lse[size_t(row)] = std::log(z);
        for (int64_t j = 0; j < lkv; ++j)
          for (int64_t c = 0; c < dv; ++c)
            out[size_t(row * dv + c)] += p[size_t(j)] / z * vv[size_t(((ckv[s] + j) * hkv + g) * dv + c)];
      }
    }
  }
}

ops::AttentionSpans spans(ops::AttentionMask mask) {
  return {Tensor::from_vector(kCuQ, {3}), Tensor::from_vector(kCuKv, {3}), 4, 5, mask};
}

struct Inputs {
  Tensor q, k, v;
};
Inputs random_inputs(Generator& gen, const Case& c, int64_t tokens_q, int64_t tokens_kv) {
  return {test::random_tensor(gen, {tokens_q, c.heads_q, c.dim_qk}),
          test::random_tensor(gen, {tokens_kv, c.heads_kv, c.dim_qk}),
          test::random_tensor(gen, {tokens_kv, c.heads_kv, c.dim_v})};
}

void expect_lse_near(const Tensor& lse, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> got = lse.to_doubles();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << what << " row " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-13) << what << " row " << i;
    }
  }
}

class OpsAttentionHeadDimsTest : public ::testing::TestWithParam<Case> {};

TEST_P(OpsAttentionHeadDimsTest, PackedForwardMatchesNaive) {
  const Case c = GetParam();
  const double scale = 1.0 / std::sqrt(double(c.dim_qk));
  Generator gen(101);
  Inputs in = random_inputs(gen, c, 7, 7);
  const Tensor cu = Tensor::from_vector(kCuKv, {3});
  Tensor out = Tensor::empty({7, c.heads_q, c.dim_v}, DType::F64), lse = Tensor::empty({7, c.heads_q}, DType::F64);
  ops::attention_forward(in.q, in.k, in.v, cu, 5, scale, out, lse);
  std::vector<double> e_out, e_lse;
  naive(in.q, in.k, in.v, kCuKv, kCuKv, ops::AttentionMask::Causal, scale, e_out, e_lse);
  EXPECT_LT(test::relative_error(out.to_doubles(), e_out), 1e-13);
  expect_lse_near(lse, e_lse, "packed");
}

TEST_P(OpsAttentionHeadDimsTest, SpansForwardMatchesNaiveForBothMasks) {
  const Case c = GetParam();
  Generator gen(102);
  Inputs in = random_inputs(gen, c, 7, 7);
  for (ops::AttentionMask mask : {ops::AttentionMask::Causal, ops::AttentionMask::None}) {
    Tensor out = Tensor::empty({7, c.heads_q, c.dim_v}, DType::F64), lse = Tensor::empty({7, c.heads_q}, DType::F64);
    ops::attention_forward(in.q, in.k, in.v, spans(mask), 0.7, out, lse);
    std::vector<double> e_out, e_lse;
    naive(in.q, in.k, in.v, kCuQ, kCuKv, mask, 0.7, e_out, e_lse);
    EXPECT_LT(test::relative_error(out.to_doubles(), e_out), 1e-13) << ops::attention_mask_name(mask);
    expect_lse_near(lse, e_lse, ops::attention_mask_name(mask));
  }
}

// Central differences of <out, proj> against the analytic dq, dk, dv; `forward`
// and `backward` run one form of the op.
template <typename Forward, typename Backward>
void expect_backward_matches_finite_differences(Inputs& in, const Case& c, Forward forward, Backward backward,
                                                const std::string& what) {
  Generator gen(103);
  const int64_t tokens = in.q.size(0);
  Tensor out = Tensor::empty({tokens, c.heads_q, c.dim_v}, DType::F64);
  Tensor lse = Tensor::empty({tokens, c.heads_q}, DType::F64);
  const std::vector<double> proj = test::random_vector(gen, size_t(out.numel()));
  auto loss = [&] {
    forward(in, out, lse);
    return test::project(out, proj);
  };
  const std::vector<double> num_dq = test::numeric_gradient(loss, in.q);
  const std::vector<double> num_dk = test::numeric_gradient(loss, in.k);
  const std::vector<double> num_dv = test::numeric_gradient(loss, in.v);
  forward(in, out, lse);
  const Tensor dout = Tensor::from_doubles(proj, out.shape(), DType::F64);
  Tensor dq = Tensor::empty(in.q.shape(), DType::F64), dk = Tensor::empty(in.k.shape(), DType::F64),
         dv = Tensor::empty(in.v.shape(), DType::F64);
  backward(in, dout, out, lse, dq, dk, dv);
  EXPECT_LT(test::relative_error(dq.to_doubles(), num_dq), 1e-6) << what;
  EXPECT_LT(test::relative_error(dk.to_doubles(), num_dk), 1e-6) << what;
  EXPECT_LT(test::relative_error(dv.to_doubles(), num_dv), 1e-6) << what;
}

TEST_P(OpsAttentionHeadDimsTest, PackedBackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  const double scale = 1.0 / std::sqrt(double(c.dim_qk));
  Generator gen(104);
  Inputs in = random_inputs(gen, c, 7, 7);
  const Tensor cu = Tensor::from_vector(kCuKv, {3});
  expect_backward_matches_finite_differences(
      in, c, [&](Inputs& x, Tensor& out, Tensor& lse) { ops::attention_forward(x.q, x.k, x.v, cu, 5, scale, out, lse); },
      [&](Inputs& x, const Tensor& dout, const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) {
        ops::attention_backward(dout, x.q, x.k, x.v, out, lse, cu, 5, scale, dq, dk, dv);
      },
      "packed");
}

TEST_P(OpsAttentionHeadDimsTest, SpansBackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  for (ops::AttentionMask mask : {ops::AttentionMask::Causal, ops::AttentionMask::None}) {
    Generator gen(105);
    Inputs in = random_inputs(gen, c, 7, 7);
    expect_backward_matches_finite_differences(
        in, c,
        [&](Inputs& x, Tensor& out, Tensor& lse) { ops::attention_forward(x.q, x.k, x.v, spans(mask), 0.6, out, lse); },
        [&](Inputs& x, const Tensor& dout, const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) {
          ops::attention_backward(dout, x.q, x.k, x.v, out, lse, spans(mask), 0.6, dq, dk, dv);
        },
        ops::attention_mask_name(mask));
  }
}

// Queries 2..5 of a causal sequence of 6 over all keys equal the merge of keys
// 0..1 (no mask) and keys 2..5 (causal): the merge runs on [T, H, Dv] rows.
TEST_P(OpsAttentionHeadDimsTest, MergeOfKeyPartsEqualsTheWhole) {
  const Case c = GetParam();
  Generator gen(106);
  Inputs in = random_inputs(gen, c, 6, 6);
  auto cu = [](int32_t n) { return Tensor::from_vector(std::vector<int32_t>{0, n}, {2}); };
  Tensor whole = Tensor::empty({6, c.heads_q, c.dim_v}, DType::F64);
  Tensor whole_lse = Tensor::empty({6, c.heads_q}, DType::F64);
  ops::attention_forward(in.q, in.k, in.v, cu(6), 6, 0.5, whole, whole_lse);
  const Tensor q4 = in.q.narrow(2, 4);
  Tensor out = Tensor::empty({4, c.heads_q, c.dim_v}, DType::F64), lse = Tensor::empty({4, c.heads_q}, DType::F64);
  ops::attention_forward(q4, in.k.narrow(2, 4), in.v.narrow(2, 4), {cu(4), cu(4), 4, 4, ops::AttentionMask::Causal},
                         0.5, out, lse);
  Tensor part = Tensor::empty(out.shape(), DType::F64), part_lse = Tensor::empty(lse.shape(), DType::F64);
  ops::attention_forward(q4, in.k.narrow(0, 2), in.v.narrow(0, 2), {cu(4), cu(2), 4, 2, ops::AttentionMask::None},
                         0.5, part, part_lse);
  ops::attention_merge(out, lse, part, part_lse);
  EXPECT_LT(test::relative_error(out.to_doubles(), whole.narrow(2, 4).to_doubles()), 1e-14);
  EXPECT_LT(test::relative_error(lse.to_doubles(), whole_lse.narrow(2, 4).to_doubles()), 1e-14);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, OpsAttentionHeadDimsTest,
                         ::testing::Values(Case{4, 2, 5, 3}, Case{2, 2, 5, 3}, Case{4, 1, 3, 5}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "q" + std::to_string(c.heads_q) + "_kv" + std::to_string(c.heads_kv) + "_dqk" +
                                  std::to_string(c.dim_qk) + "_dv" + std::to_string(c.dim_v);
                         });

TEST(OpsAttentionHeadDims, RejectsMismatchedHeadDims) {
  const DType f = DType::F64;
  const Tensor cu = Tensor::from_vector(kCuKv, {3});
  Tensor q = Tensor::zeros({7, 4, 5}, f), k = Tensor::zeros({7, 2, 5}, f), v = Tensor::zeros({7, 2, 3}, f);
  Tensor out = Tensor::zeros({7, 4, 3}, f), lse = Tensor::zeros({7, 4}, f);
  EXPECT_NO_THROW(ops::attention_forward(q, k, v, cu, 5, 1.0, out, lse));

  Tensor k_bad = Tensor::zeros({7, 2, 4}, f);
  const std::string k_err = error_of([&] { ops::attention_forward(q, k_bad, v, cu, 5, 1.0, out, lse); });
  EXPECT_NE(k_err.find("k has head dim 4 but q has 5"), std::string::npos) << k_err;

  Tensor v_heads = Tensor::zeros({7, 1, 3}, f);
  const std::string v_err = error_of([&] { ops::attention_forward(q, k, v_heads, cu, 5, 1.0, out, lse); });
  EXPECT_NE(v_err.find("head_dim_v may differ from head_dim_qk 5"), std::string::npos) << v_err;

  Tensor out_qk = Tensor::zeros({7, 4, 5}, f);   // shaped by the q/k head dim instead of v's
  const std::string out_err = error_of([&] { ops::attention_forward(q, k, v, cu, 5, 1.0, out_qk, lse); });
  EXPECT_NE(out_err.find("'out' has shape [7, 4, 5], expected [7, 4, 3]"), std::string::npos) << out_err;

  Tensor dq = Tensor::zeros(q.shape(), f), dk = Tensor::zeros(k.shape(), f), dv = Tensor::zeros(v.shape(), f);
  EXPECT_NO_THROW(ops::attention_backward(out, q, k, v, out, lse, cu, 5, 1.0, dq, dk, dv));
  EXPECT_THROW(ops::attention_backward(out_qk, q, k, v, out, lse, cu, 5, 1.0, dq, dk, dv), Error);   // dout
  EXPECT_THROW(ops::attention_backward(out, q, k, v, out, lse, cu, 5, 1.0, dq, dk, dk), Error);      // dv as k
  EXPECT_THROW(ops::attention_backward(out, q, k, v, out, lse, spans(ops::AttentionMask::Causal), 1.0, dq, dk, dk),
               Error);
  EXPECT_THROW(ops::attention_forward(q, k_bad, v, spans(ops::AttentionMask::None), 1.0, out, lse), Error);
}

}  // namespace
}  // namespace bb
