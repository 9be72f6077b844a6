// Float64 finite-difference checks of SelfAttention on one rank: dx and every
// projection's (and q/k norm scale's) gradient, for grouped-query attention
// over packed variable-length sequences of odd lengths, with and without q/k
// norm; packed sequences see only themselves; selective recompute of the core
// attention gives the same outputs and gradients bit for bit.
#include <gtest/gtest.h>

#include <string>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr double kTol = 1e-9;
const std::vector<int64_t> kSeqLens{5, 7, 3};
constexpr int64_t kTokens = 15;

struct AttentionCase {
  int64_t heads, kv_heads;
  bool qk_norm;
};

AttentionConfig config_of(const AttentionCase& c, bool recompute = false) {
  AttentionConfig cfg;
  cfg.hidden = 8;
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = 4;
  cfg.qk_norm = c.qk_norm;
  cfg.recompute_core_attention = recompute;
  return cfg;
}

std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const AttentionCase& c = info.param;
  return "heads" + std::to_string(c.heads) + "_kv" + std::to_string(c.kv_heads) +
         (c.qk_norm ? "_qk_norm" : "_no_qk_norm");
}

class SelfAttentionGradients : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(SelfAttentionGradients, MatchFiniteDifferences) {
  const AttentionConfig cfg = config_of(GetParam());
  test::ModuleFixture fx;
  auto attn = fx.make_attention(cfg);
  fx.allocate_and_init(31);
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  Generator gen(32);
  Tensor x = test::random_tensor(gen, {kTokens, cfg.hidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * cfg.hidden);
  auto loss = [&] {
    SelfAttention::Saved s;
    return test::project(attn->forward(x, seq, s), proj);
  };

  SelfAttention::Saved s;
  attn->forward(x, seq, s);
  Tensor dx = attn->backward(Tensor::from_doubles(proj, {kTokens, cfg.hidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

INSTANTIATE_TEST_SUITE_P(GqaAndQkNorm, SelfAttentionGradients,
                         ::testing::Values(AttentionCase{4, 2, false}, AttentionCase{4, 2, true},
                                           AttentionCase{4, 1, true}, AttentionCase{2, 2, false}),
                         case_name);

// The packed batch gives each sequence the output it has alone, with
// positions restarting at 0: no attention across sequence boundaries.
TEST(SelfAttention, PackedSequencesMatchEachSequenceAlone) {
  const AttentionConfig cfg = config_of({4, 2, true});
  test::ModuleFixture fx;
  auto attn = fx.make_attention(cfg);
  fx.allocate_and_init(33);
  Generator gen(34);
  Tensor x = test::random_tensor(gen, {kTokens, cfg.hidden});
  SelfAttention::Saved s;
  const std::vector<double> packed = attn->forward(x, test::packed_sequences(kSeqLens), s).to_doubles();
  int64_t t0 = 0;
  for (int64_t len : kSeqLens) {
    SelfAttention::Saved alone;
    const std::vector<double> y = attn->forward(x.narrow(t0, len).clone(), test::packed_sequences({len}), alone)
                                      .to_doubles();
    const std::vector<double> part(packed.begin() + t0 * cfg.hidden, packed.begin() + (t0 + len) * cfg.hidden);
    EXPECT_LT(test::relative_error(y, part), 1e-14) << "sequence at token " << t0;
    t0 += len;
  }
}

// Recomputing the attention kernel in backward re-runs the same op on the
// same saved q, k, v, so nothing may differ at all.
TEST(SelfAttention, RecomputeCoreAttentionGivesIdenticalGradients) {
  const SequenceLayout seq = test::packed_sequences(kSeqLens);
  Generator gen(35);
  Tensor x = test::random_tensor(gen, {kTokens, 8});
  Tensor dy = test::random_tensor(gen, {kTokens, 8});
  std::vector<double> y[2], dx[2];
  std::vector<std::vector<double>> grads[2];
  for (int recompute = 0; recompute < 2; ++recompute) {
    test::ModuleFixture fx;
    auto attn = fx.make_attention(config_of({4, 2, true}, recompute == 1));
    fx.allocate_and_init(36);
    SelfAttention::Saved s;
    y[recompute] = attn->forward(x, seq, s).to_doubles();
    if (recompute == 1) EXPECT_FALSE(s.out.defined()) << "recompute keeps the core attention output";
    dx[recompute] = attn->backward(dy, seq, s).to_doubles();
    for (Parameter& p : fx.params()) grads[recompute].push_back(p.grad.to_doubles());
  }
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(grads[0], grads[1]);
}

}  // namespace
}  // namespace bb
