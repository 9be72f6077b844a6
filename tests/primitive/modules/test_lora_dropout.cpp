// LoRA dropout (primitive/modules/lora_dropout.h) in float64 on one rank:
// x, W, A and B gradients of column- and row-parallel layers and the fused
// gate|up|down MLP against finite differences with the microbatch's fixed
// mask; p = 0 and eval (no training key) are the no-dropout path bit for bit;
// the adapter input's mean over masks is x (inverted scaling); the adapter
// branch is peft's B A dropout(x) by hand; DoRA with dropout is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/dropout.h"
#include "bumblebee/ops/ops.h"
#include "module_fixture.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 7, kIn = 6, kOut = 5;
constexpr double kTol = 1e-9;
const LoraDropout kTraining{true, 0x5eedull};

LoraConfig lora(std::vector<std::string> targets, double dropout) {
  LoraConfig cfg;
  cfg.target_modules = std::move(targets);
  cfg.rank = 3;
  cfg.alpha = 5.0;
  cfg.dropout = dropout;
  return cfg;
}

TEST(LoraDropout, ColumnParallelGradientsMatchFiniteDifferencesWithAFixedMask) {
  test::ModuleFixture fx;
  fx.set_lora(lora({"q_proj"}, 0.4));
  auto linear = fx.make_column_linear(kIn, kOut, "q_proj.weight");
  fx.allocate_and_init(11);
  Generator gen(12);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = [&] { return test::project(linear->forward(x, kTraining), proj); };
  Tensor dx;
  linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x, dx, false, kTraining);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(LoraDropout, RowParallelGradientsMatchFiniteDifferencesWithAFixedMask) {
  test::ModuleFixture fx;
  fx.set_lora(lora({"o_proj"}, 0.3));
  auto linear = fx.make_row_linear(kIn, kOut, "o_proj.weight");
  fx.allocate_and_init(21);
  Generator gen(22);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kOut);
  auto loss = [&] { return test::project(linear->forward(x, kTraining), proj); };
  Tensor dx = linear->backward(Tensor::from_doubles(proj, {kTokens, kOut}, DType::F64), x, kTraining);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

TEST(LoraDropout, FusedGateUpAndDownGradientsMatchFiniteDifferencesWithAFixedMask) {
  constexpr int64_t kHidden = 6, kFfn = 8;
  test::ModuleFixture fx;
  fx.set_lora(lora({"gate_proj", "up_proj", "down_proj"}, 0.5));
  auto mlp = fx.make_mlp(kHidden, kFfn);
  fx.allocate_and_init(51);
  Generator gen(52);
  SequenceLayout seq;
  seq.lora_dropout = kTraining;
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(mlp->forward(x, seq, s), proj);
  };
  std::unique_ptr<BlockState> s;
  mlp->forward(x, seq, s);
  Tensor dx = mlp->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol);
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

// Output, dx and every parameter gradient of a row layer, under `drop`.
std::vector<std::vector<double>> run_row_layer(double p, const LoraDropout& drop) {
  test::ModuleFixture fx;
  fx.set_lora(lora({"o_proj"}, p));
  auto linear = fx.make_row_linear(kIn, kOut, "o_proj.weight");
  fx.allocate_and_init(31);
  Generator gen(32);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  Tensor dy = test::random_tensor(gen, {kTokens, kOut});
  std::vector<std::vector<double>> out = {linear->forward(x, drop).to_doubles(),
                                          linear->backward(dy, x, drop).to_doubles()};
  for (Parameter& prm : fx.store().params())
    if (prm.grad.defined()) out.push_back(prm.grad.to_doubles());
  return out;
}

TEST(LoraDropout, ZeroPIsTheNoDropoutPathBitForBit) {
  EXPECT_EQ(run_row_layer(0.0, kTraining), run_row_layer(0.0, LoraDropout{}));
}

TEST(LoraDropout, EvalModeIsTheIdentity) {
  EXPECT_EQ(run_row_layer(0.6, LoraDropout{}), run_row_layer(0.0, LoraDropout{}));
  EXPECT_NE(run_row_layer(0.6, kTraining), run_row_layer(0.0, LoraDropout{}));
}

TEST(LoraDropout, AdapterBranchIsBAOfTheDroppedInput) {
  constexpr double kP = 0.5;
  test::ModuleFixture fx;
  fx.set_lora(lora({"q_proj"}, kP));
  auto linear = fx.make_column_linear(kIn, kOut, "q_proj.weight");
  fx.allocate_and_init(41);
  Generator gen(42);
  Tensor x = test::random_tensor(gen, {kTokens, kIn});
  const Tensor xd = lora_dropout_input(x, kP, kTraining, "q_proj.weight", kIn, 0);
  const std::vector<double> xv = x.to_doubles(), xdv = xd.to_doubles(), w = linear->weight().value.to_doubles(),
                            a = linear->lora()->A().value.to_doubles(), b = linear->lora()->B().value.to_doubles();
  int64_t dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (xdv[i] == 0.0) ++dropped;
    else EXPECT_EQ(xdv[i], xv[i] * 2.0);
  }
  EXPECT_GT(dropped, 0);
  const std::vector<double> y = linear->forward(x, kTraining).to_doubles();
  const double s = 5.0 / 3.0;
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t o = 0; o < kOut; ++o) {
      double expect = 0.0;
      for (int64_t i = 0; i < kIn; ++i) expect += xv[t * kIn + i] * w[o * kIn + i];
      for (int64_t r = 0; r < 3; ++r) {
        double u = 0.0;
        for (int64_t i = 0; i < kIn; ++i) u += xdv[t * kIn + i] * a[r * kIn + i];
        expect += s * u * b[o * 3 + r];
      }
      EXPECT_NEAR(y[t * kOut + o], expect, 1e-12);
    }
}

TEST(LoraDropout, MeanOverMasksIsTheInput) {
  constexpr int64_t kRows = 32, kCols = 32, kDraws = 64;
  constexpr double kP = 0.25;
  Tensor x = Tensor::from_doubles(std::vector<double>(kRows * kCols, 1.0), {kRows, kCols}, DType::F64);
  double sum = 0;
  for (int64_t d = 0; d < kDraws; ++d)
    sum += ops::sum(lora_dropout_input(x, kP, {true, lora_dropout_key(1, 0, d, 0, 0)}, "q_proj.weight", kCols, 0));
  const double n = double(kRows * kCols * kDraws);
  EXPECT_NEAR(sum / n, 1.0, 5 * std::sqrt(kP / (1 - kP) / n));
}

TEST(LoraDropout, KeysDifferOverStepMicrobatchAndRanksAndAdaptersDrawTheirOwnMasks) {
  const uint64_t k = lora_dropout_key(9, 3, 1, 0, 0);
  EXPECT_EQ(k, lora_dropout_key(9, 3, 1, 0, 0));
  for (uint64_t other : {lora_dropout_key(8, 3, 1, 0, 0), lora_dropout_key(9, 4, 1, 0, 0),
                         lora_dropout_key(9, 3, 2, 0, 0), lora_dropout_key(9, 3, 1, 1, 0),
                         lora_dropout_key(9, 3, 1, 0, 1)})
    EXPECT_NE(k, other);
  Tensor x = Tensor::from_doubles(std::vector<double>(64, 1.0), {8, 8}, DType::F64);
  EXPECT_NE(lora_dropout_input(x, 0.5, {true, k}, "q_proj.weight", 8, 0).to_doubles(),
            lora_dropout_input(x, 0.5, {true, k}, "k_proj.weight", 8, 0).to_doubles());
}

TEST(LoraDropout, DoraWithDropoutIsRefused) {
  LoraConfig cfg = lora({"q_proj"}, 0.1);
  cfg.use_dora = true;
  try {
    check_lora_config(cfg);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("peft.dropout 0.1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dora"), std::string::npos) << msg;
  }
  EXPECT_THROW(check_lora_config(lora({"q_proj"}, 1.0)), Error);
}

}  // namespace
}  // namespace bb
