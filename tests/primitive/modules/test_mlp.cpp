// Float64 finite-difference checks of the SwiGLU MLP on one rank: dx and the
// gate, up and down projections' gradients (gate|up run as one fused GEMM over
// adjacent weights, so their gradients are checked through that fused view).
#include <gtest/gtest.h>

#include <cmath>

#include "module_fixture.h"

namespace bb {
namespace {

constexpr int64_t kTokens = 9, kHidden = 6, kFfn = 10;
constexpr double kTol = 1e-9;

TEST(SwiGLUMLP, GradientsMatchFiniteDifferences) {
  test::ModuleFixture fx;
  auto mlp = fx.make_mlp(kHidden, kFfn);
  fx.allocate_and_init(41);
  Generator gen(42);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  auto loss = [&] {
    std::unique_ptr<BlockState> s;
    return test::project(mlp->forward(x, SequenceLayout{}, s), proj);
  };

  std::unique_ptr<BlockState> s;
  mlp->forward(x, SequenceLayout{}, s);
  Tensor dx = mlp->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), SequenceLayout{}, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), kTol) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, kTol);
}

// down(silu(gate x) * up x), computed naively from the parameters by name.
TEST(SwiGLUMLP, ForwardMatchesNaive) {
  test::ModuleFixture fx;
  auto mlp = fx.make_mlp(kHidden, kFfn);
  fx.allocate_and_init(43);
  Generator gen(44);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> vx = x.to_doubles(), wg = fx.param("gate_proj.weight").value.to_doubles(),
                            wu = fx.param("up_proj.weight").value.to_doubles(),
                            wd = fx.param("down_proj.weight").value.to_doubles();
  std::vector<double> expect(size_t(kTokens * kHidden), 0.0);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t f = 0; f < kFfn; ++f) {
      double g = 0.0, u = 0.0;
      for (int64_t i = 0; i < kHidden; ++i) {
        g += vx[size_t(t * kHidden + i)] * wg[size_t(f * kHidden + i)];
        u += vx[size_t(t * kHidden + i)] * wu[size_t(f * kHidden + i)];
      }
      const double h = g / (1.0 + std::exp(-g)) * u;
      for (int64_t o = 0; o < kHidden; ++o) expect[size_t(t * kHidden + o)] += h * wd[size_t(o * kFfn + f)];
    }
  }
  std::unique_ptr<BlockState> s;
  EXPECT_LT(test::relative_error(mlp->forward(x, SequenceLayout{}, s).to_doubles(), expect), 1e-14);
}

// Selective recompute of the activation: forward keeps no h, and backward
// (which rebuilds it) gives the plain MLP's dx and weight gradients exactly.
TEST(SwiGLUMLP, RecomputedActivationIsDroppedAndGivesTheSameGradients) {
  test::ModuleFixture plain_fx, recompute_fx;
  auto plain = plain_fx.make_mlp(kHidden, kFfn);
  auto recomputed = recompute_fx.make_mlp(kHidden, kFfn, "", true);
  plain_fx.allocate_and_init(45);
  recompute_fx.allocate_and_init(45);
  Generator gen(46);
  const Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const Tensor dy = test::random_tensor(gen, {kTokens, kHidden});
  std::unique_ptr<BlockState> ps, rs;
  const std::vector<double> y = plain->forward(x, SequenceLayout{}, ps).to_doubles();
  EXPECT_EQ(recomputed->forward(x, SequenceLayout{}, rs).to_doubles(), y);
  EXPECT_TRUE(static_cast<SwiGLUMLP::Saved&>(*ps).h.defined());
  EXPECT_FALSE(static_cast<SwiGLUMLP::Saved&>(*rs).h.defined());
  const std::vector<double> dx = plain->backward(dy, SequenceLayout{}, ps).to_doubles();
  EXPECT_EQ(recomputed->backward(dy, SequenceLayout{}, rs).to_doubles(), dx);
  for (const char* name : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
    EXPECT_EQ(plain_fx.param(name).grad.to_doubles(), recompute_fx.param(name).grad.to_doubles()) << name;
}

}  // namespace
}  // namespace bb
