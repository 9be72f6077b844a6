// Tensor-parallel modules at tp = the number of ranks, with sequence parallel
// as TensorParallel runs it, against the same module on one rank in float64:
// Column/Row linear, SelfAttention (GQA, q/k norm on and off, packed
// sequences), multi-head latent attention, the SwiGLU MLP, attention and MLP with LoRA on every projection, the DecoderLayer (every recompute mode) and the
// vocab-parallel LM head (vocabulary padded to a multiple of tp). Every rank builds both from the same seed, feeds its
// shard of the same inputs, and checks that its outputs, input gradients and
// parameter-gradient shards (replicated ones summed over the group) equal its
// slice of the single-rank results to 1e-12. Sizes that tp does not divide
// are skipped.
#include <gtest/gtest.h>

#include "../primitive/modules/module_fixture.h"
#include "bumblebee/distributed/world.h"

namespace bb {
namespace {

constexpr double kTol = 1e-12;
constexpr int64_t kTokens = 24;

int tp_size() { return dist::World::instance().size(); }
int tp_rank() { return dist::World::instance().rank(); }
// Every rank in one tensor-parallel group.
std::shared_ptr<dist::ParallelState> tp_group() {
  dist::GroupSizes sizes;
  sizes.tp = tp_size();
  return dist::ParallelState::create(dist::World::instance(), sizes);
}

// This rank's rows of a [rows, ...] tensor under sequence parallel.
Tensor token_shard(const Tensor& t) {
  const int64_t n = t.size(0) / tp_size();
  return t.narrow(tp_rank() * n, n).clone();
}

// Columns [begin, begin + count) of a [rows, cols] tensor.
Tensor column_slice(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t rows = t.size(0), cols = t.size(1);
  const std::vector<double> v = t.to_doubles();
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = begin; c < begin + count; ++c) out.push_back(v[size_t(r * cols + c)]);
  return Tensor::from_doubles(out, {rows, count}, DType::F64);
}

// The part of the single-rank tensor `full` that parameter `local` holds
// (vocabulary padding rows: zero).
std::vector<double> shard_of(const Tensor& full, const Parameter& local) {
  switch (local.shard) {
    case ShardKind::Replicated:
      return full.to_doubles();
    case ShardKind::Row:
      return column_slice(full, local.shard_begin, local.local_shape[1]).to_doubles();
    case ShardKind::Column:
    case ShardKind::Vocab: {
      // A rank past the end of the vocabulary holds padding only.
      std::vector<double> out;
      if (local.shard_valid > 0) out = full.narrow(local.shard_begin, local.shard_valid).to_doubles();
      out.resize(size_t(shape_numel(local.local_shape)), 0.0);
      return out;
    }
  }
  return {};
}

// Every parameter's value and gradient on this rank against its part of the single-rank one.
void expect_parameter_shards_match(test::ModuleFixture& parallel, test::ModuleFixture& single) {
  parallel.reduce_replicated_grads();
  for (Parameter& p : parallel.params()) {
    const Parameter& ref = single.param(p.name);
    EXPECT_EQ(p.value.to_doubles(), shard_of(ref.value, p)) << p.name << " value";
    EXPECT_LT(test::relative_error(p.grad.to_doubles(), shard_of(ref.grad, p)), kTol) << p.name << " grad";
  }
}

bool divides(std::initializer_list<int64_t> sizes) {
  for (int64_t s : sizes)
    if (s % tp_size() != 0) return false;
  return true;
}

TEST(MpiTensorParallelModules, ColumnParallelLinearMatchesOneRank) {
  constexpr int64_t kIn = 8, kOut = 16;
  if (!divides({kTokens, kOut})) GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  Generator gen(101);
  Tensor x = test::random_tensor(gen, {kTokens, kIn}), dy = test::random_tensor(gen, {kTokens, kOut});

  test::ModuleFixture single;
  auto ref = single.make_column_linear(kIn, kOut);
  single.allocate_and_init(102);
  const Tensor y_ref = ref->forward(x);
  Tensor dx_ref;
  ref->backward(dy, x, dx_ref, false);

  test::ModuleFixture parallel(tp_group());
  auto linear = parallel.make_column_linear(kIn, kOut);
  parallel.allocate_and_init(102);
  // The enclosing block enters the region once; the layer sees whole tokens.
  Tensor x_full = parallel.tp().enter(token_shard(x));
  const int64_t first = linear->weight().shard_begin, n = linear->local_out();
  EXPECT_LT(test::relative_error(linear->forward(x_full).to_doubles(), column_slice(y_ref, first, n).to_doubles()),
            kTol);
  Tensor dx_full;
  linear->backward(column_slice(dy, first, n), x_full, dx_full, false);
  EXPECT_LT(test::relative_error(parallel.tp().enter_backward(dx_full).to_doubles(), token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

TEST(MpiTensorParallelModules, RowParallelLinearMatchesOneRank) {
  constexpr int64_t kIn = 16, kOut = 8;
  if (!divides({kTokens, kIn})) GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  Generator gen(111);
  Tensor x = test::random_tensor(gen, {kTokens, kIn}), dy = test::random_tensor(gen, {kTokens, kOut});

  test::ModuleFixture single;
  auto ref = single.make_row_linear(kIn, kOut);
  single.allocate_and_init(112);
  const Tensor y_ref = ref->forward(x);
  const Tensor dx_ref = ref->backward(dy, x);

  test::ModuleFixture parallel(tp_group());
  auto linear = parallel.make_row_linear(kIn, kOut);
  parallel.allocate_and_init(112);
  const int64_t first = linear->weight().shard_begin, n = linear->weight().local_shape[1];
  Tensor x_local = column_slice(x, first, n);
  EXPECT_LT(test::relative_error(linear->forward(x_local).to_doubles(), token_shard(y_ref).to_doubles()), kTol);
  EXPECT_LT(test::relative_error(linear->backward(token_shard(dy), x_local).to_doubles(),
                                 column_slice(dx_ref, first, n).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

class MpiTensorParallelAttention : public ::testing::TestWithParam<bool> {};

TEST_P(MpiTensorParallelAttention, MatchesOneRank) {
  AttentionConfig cfg;
  cfg.hidden = 8;
  cfg.num_heads = 16;
  cfg.num_kv_heads = 8;
  cfg.head_dim = 4;
  cfg.qk_norm = GetParam();
  if (!divides({kTokens, cfg.num_heads, cfg.num_kv_heads}))
    GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  const SequenceLayout seq = test::packed_sequences({5, 7, 9, 3});
  Generator gen(121);
  Tensor x = test::random_tensor(gen, {kTokens, cfg.hidden}), dy = test::random_tensor(gen, {kTokens, cfg.hidden});

  test::ModuleFixture single;
  auto ref = single.make_attention(cfg);
  single.allocate_and_init(122);
  SelfAttention::Saved rs;
  const Tensor y_ref = ref->forward(x, seq, rs);
  const Tensor dx_ref = ref->backward(dy, seq, rs);

  test::ModuleFixture parallel(tp_group());
  auto attn = parallel.make_attention(cfg);
  parallel.allocate_and_init(122);
  SelfAttention::Saved s;
  EXPECT_LT(test::relative_error(attn->forward(token_shard(x), seq, s).to_doubles(), token_shard(y_ref).to_doubles()),
            kTol);
  EXPECT_LT(test::relative_error(attn->backward(token_shard(dy), seq, s).to_doubles(),
                                 token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

INSTANTIATE_TEST_SUITE_P(QkNormOffOn, MpiTensorParallelAttention, ::testing::Bool());

// Multi-head latent attention: heads split over tp (q_b_proj or q_proj and
// kv_b_proj by rows, o_proj by columns), the compressed kv path and the q
// low-rank path replicated; with and without q_lora_rank.
class MpiTensorParallelMLA : public ::testing::TestWithParam<bool> {};

TEST_P(MpiTensorParallelMLA, MatchesOneRank) {
  MLAConfig cfg;
  cfg.hidden = 8;
  cfg.num_heads = 8;
  cfg.q_lora_rank = GetParam() ? 6 : 0;
  cfg.kv_lora_rank = 5;
  cfg.qk_nope_head_dim = 4;
  cfg.qk_rope_head_dim = 4;
  cfg.v_head_dim = 8;
  cfg.softmax_scale = 0.35;
  cfg.rope_scale = 1.2;
  if (!divides({kTokens, cfg.num_heads})) GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  const SequenceLayout seq = test::packed_sequences({5, 7, 9, 3});
  Generator gen(141);
  Tensor x = test::random_tensor(gen, {kTokens, cfg.hidden}), dy = test::random_tensor(gen, {kTokens, cfg.hidden});

  test::ModuleFixture single;
  auto ref = single.make_mla_attention(cfg);
  single.allocate_and_init(142);
  std::unique_ptr<BlockState> rs;
  const Tensor y_ref = ref->forward(x, seq, rs);
  const Tensor dx_ref = ref->backward(dy, seq, rs);

  test::ModuleFixture parallel(tp_group());
  auto attn = parallel.make_mla_attention(cfg);
  parallel.allocate_and_init(142);
  std::unique_ptr<BlockState> s;
  EXPECT_LT(test::relative_error(attn->forward(token_shard(x), seq, s).to_doubles(), token_shard(y_ref).to_doubles()),
            kTol);
  EXPECT_LT(test::relative_error(attn->backward(token_shard(dy), seq, s).to_doubles(),
                                 token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

INSTANTIATE_TEST_SUITE_P(QProjOrLowRank, MpiTensorParallelMLA, ::testing::Bool());

TEST(MpiTensorParallelModules, SwiGLUMLPMatchesOneRank) {
  constexpr int64_t kHidden = 8, kFfn = 24;
  if (!divides({kTokens, kFfn})) GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  Generator gen(131);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden}), dy = test::random_tensor(gen, {kTokens, kHidden});

  test::ModuleFixture single;
  auto ref = single.make_mlp(kHidden, kFfn);
  single.allocate_and_init(132);
  std::unique_ptr<BlockState> rs;
  const Tensor y_ref = ref->forward(x, SequenceLayout{}, rs);
  const Tensor dx_ref = ref->backward(dy, SequenceLayout{}, rs);

  test::ModuleFixture parallel(tp_group());
  auto mlp = parallel.make_mlp(kHidden, kFfn);
  parallel.allocate_and_init(132);
  std::unique_ptr<BlockState> s;
  EXPECT_LT(test::relative_error(mlp->forward(token_shard(x), SequenceLayout{}, s).to_doubles(), token_shard(y_ref).to_doubles()), kTol);
  EXPECT_LT(test::relative_error(mlp->backward(token_shard(dy), SequenceLayout{}, s).to_doubles(), token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

// LoRA on every projection (primitive/modules/lora.h): A replicated and B
// split as the rows of a column-parallel base, A split as the columns of a
// row-parallel base and B replicated; the fused gate|up GEMM places each
// adapter's output in its own column block. Every A and B is random (B too).
// With dropout every rank draws one rank's mask: the same for a column
// layer's replicated input, its slice of it for a row layer's split input.
LoraConfig all_linear_lora(double dropout) {
  LoraConfig cfg;
  cfg.target_modules = {"all-linear"};
  cfg.rank = 3;
  cfg.alpha = 5.0;
  cfg.dropout = dropout;
  return cfg;
}

SequenceLayout with_dropout(SequenceLayout seq, double dropout) {
  if (dropout > 0) seq.lora_dropout = {true, lora_dropout_key(7, 2, 1, 0, 0)};
  return seq;
}

class MpiTensorParallelLora : public ::testing::TestWithParam<double> {};

TEST_P(MpiTensorParallelLora, AttentionMatchesOneRank) {
  AttentionConfig cfg;
  cfg.hidden = 8;
  cfg.num_heads = 8;
  cfg.num_kv_heads = 4;
  cfg.head_dim = 4;
  cfg.qk_norm = true;
  if (!divides({kTokens, cfg.num_heads, cfg.num_kv_heads}))
    GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  const SequenceLayout seq = with_dropout(test::packed_sequences({5, 7, 9, 3}), GetParam());
  Generator gen(141);
  Tensor x = test::random_tensor(gen, {kTokens, cfg.hidden}), dy = test::random_tensor(gen, {kTokens, cfg.hidden});

  test::ModuleFixture single;
  single.set_lora(all_linear_lora(GetParam()));
  auto ref = single.make_attention(cfg);
  single.allocate_and_init(142);
  SelfAttention::Saved rs;
  const Tensor y_ref = ref->forward(x, seq, rs);
  const Tensor dx_ref = ref->backward(dy, seq, rs);

  test::ModuleFixture parallel(tp_group());
  parallel.set_lora(all_linear_lora(GetParam()));
  auto attn = parallel.make_attention(cfg);
  parallel.allocate_and_init(142);
  SelfAttention::Saved s;
  EXPECT_LT(test::relative_error(attn->forward(token_shard(x), seq, s).to_doubles(), token_shard(y_ref).to_doubles()),
            kTol);
  EXPECT_LT(test::relative_error(attn->backward(token_shard(dy), seq, s).to_doubles(),
                                 token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

TEST_P(MpiTensorParallelLora, SwiGLUMLPMatchesOneRank) {
  constexpr int64_t kHidden = 8, kFfn = 24;
  const SequenceLayout seq = with_dropout(SequenceLayout{}, GetParam());
  if (!divides({kTokens, kFfn})) GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  Generator gen(151);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden}), dy = test::random_tensor(gen, {kTokens, kHidden});

  test::ModuleFixture single;
  single.set_lora(all_linear_lora(GetParam()));
  auto ref = single.make_mlp(kHidden, kFfn);
  single.allocate_and_init(152);
  std::unique_ptr<BlockState> rs;
  const Tensor y_ref = ref->forward(x, seq, rs);
  const Tensor dx_ref = ref->backward(dy, seq, rs);

  test::ModuleFixture parallel(tp_group());
  parallel.set_lora(all_linear_lora(GetParam()));
  auto mlp = parallel.make_mlp(kHidden, kFfn);
  parallel.allocate_and_init(152);
  std::unique_ptr<BlockState> s;
  EXPECT_LT(test::relative_error(mlp->forward(token_shard(x), seq, s).to_doubles(),
                                 token_shard(y_ref).to_doubles()),
            kTol);
  EXPECT_LT(test::relative_error(mlp->backward(token_shard(dy), seq, s).to_doubles(),
                                 token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

INSTANTIATE_TEST_SUITE_P(Dropout, MpiTensorParallelLora, ::testing::Values(0.0, 0.3));

// The whole layer, also with full recompute: the re-run forward in backward
// issues its collectives again, in the same order on every rank.
class MpiTensorParallelDecoderLayer : public ::testing::TestWithParam<RecomputeMode> {};

TEST_P(MpiTensorParallelDecoderLayer, MatchesOneRank) {
  DecoderLayerConfig cfg;
  cfg.attention.hidden = 8;
  cfg.attention.num_heads = 16;
  cfg.attention.num_kv_heads = 8;
  cfg.attention.head_dim = 4;
  cfg.attention.qk_norm = true;
  cfg.attention.recompute_core_attention = GetParam() == RecomputeMode::Selective;
  const int64_t ffn = 24;
  if (!divides({kTokens, cfg.attention.num_heads, cfg.attention.num_kv_heads, ffn}))
    GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  const SequenceLayout seq = test::packed_sequences({9, 3, 7, 5});
  Generator gen(151);
  Tensor x = test::random_tensor(gen, {kTokens, 8}), dy = test::random_tensor(gen, {kTokens, 8});

  test::ModuleFixture single;
  auto ref = single.make_decoder_layer(cfg, ffn, GetParam());
  single.allocate_and_init(152);
  std::unique_ptr<BlockState> rs;
  const Tensor y_ref = ref->forward(x, seq, rs);
  const Tensor dx_ref = ref->backward(dy, seq, rs);

  test::ModuleFixture parallel(tp_group());
  auto layer = parallel.make_decoder_layer(cfg, ffn, GetParam());
  parallel.allocate_and_init(152);
  std::unique_ptr<BlockState> s;
  EXPECT_LT(test::relative_error(layer->forward(token_shard(x), seq, s).to_doubles(), token_shard(y_ref).to_doubles()),
            kTol);
  EXPECT_LT(test::relative_error(layer->backward(token_shard(dy), seq, s).to_doubles(),
                                 token_shard(dx_ref).to_doubles()),
            kTol);
  expect_parameter_shards_match(parallel, single);
}

INSTANTIATE_TEST_SUITE_P(RecomputeModes, MpiTensorParallelDecoderLayer,
                         ::testing::Values(RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full));

// A vocabulary of 13 is padded on every tp > 1; masked tokens carry dloss 0.
TEST(MpiTensorParallelModules, LMHeadMatchesOneRank) {
  constexpr int64_t kHidden = 8, kVocab = 13;
  if (!divides({kTokens})) GTEST_SKIP() << "tp " << tp_size() << " does not divide the sizes";
  Generator gen(141);
  Tensor h = test::random_tensor(gen, {kTokens, kHidden});
  std::vector<int64_t> label(static_cast<size_t>(kTokens));
  std::vector<double> dl(static_cast<size_t>(kTokens));
  for (int64_t t = 0; t < kTokens; ++t) {
    const bool masked = t % 5 == 2;
    label[size_t(t)] = masked ? -100 : int64_t(gen.next_u64() % uint64_t(kVocab));
    dl[size_t(t)] = masked ? 0.0 : 1.0 / double(kTokens);
  }
  const Tensor labels = Tensor::from_vector(label, {kTokens});
  const Tensor dloss = Tensor::from_doubles(dl, {kTokens}, DType::F64);

  test::ModuleFixture single;
  auto ref = single.make_lm_head(kVocab, kHidden, 0.7);
  single.allocate_and_init(142);
  LMHead::Saved rs;
  const Tensor loss_ref = ref->forward(h, labels, dloss, rs);
  const Tensor dh_ref = ref->backward(dloss, rs);

  test::ModuleFixture parallel(tp_group());
  auto head = parallel.make_lm_head(kVocab, kHidden, 0.7);
  parallel.allocate_and_init(142);
  LMHead::Saved s;
  EXPECT_LT(test::relative_error(head->forward(token_shard(h), labels, dloss, s).to_doubles(), loss_ref.to_doubles()),
            kTol);
  EXPECT_LT(test::relative_error(head->backward(dloss, s).to_doubles(), token_shard(dh_ref).to_doubles()), kTol);
  expect_parameter_shards_match(parallel, single);
}

}  // namespace
}  // namespace bb
