// Tests of the AdamW step on the CPU against a scalar transcription of
// torch.optim.AdamW (single tensor, no amsgrad, no maximize) over 3 steps.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

struct ScalarAdamW {
  double p, m = 0.0, v = 0.0;

  // torch.optim.adamw._single_tensor_adamw, one element.
  void step(double grad, const ops::AdamWParams& hp) {
    const double g = grad * hp.grad_scale;
    p *= 1.0 - hp.lr * hp.weight_decay;
    m += (g - m) * (1.0 - hp.beta1);  // exp_avg.lerp_(grad, 1 - beta1)
    v = v * hp.beta2 + (1.0 - hp.beta2) * g * g;
    const double bias_correction1 = 1.0 - std::pow(hp.beta1, double(hp.step));
    const double bias_correction2 = 1.0 - std::pow(hp.beta2, double(hp.step));
    const double step_size = hp.lr / bias_correction1;
    const double denom = std::sqrt(v) / std::sqrt(bias_correction2) + hp.eps;
    p -= step_size * m / denom;
  }
};

void run_three_steps(DType dt, double tol) {
  Generator gen(101);
  const int64_t n = 9;
  Tensor param = test::random_tensor(gen, {n}, dt);
  Tensor exp_avg = Tensor::zeros({n}, dt), exp_avg_sq = Tensor::zeros({n}, dt);
  std::vector<ScalarAdamW> ref;
  for (double p : param.to_doubles()) ref.push_back({p});
  ops::AdamWParams hp;
  hp.lr = 3e-2;
  hp.beta1 = 0.8;
  hp.beta2 = 0.95;
  hp.eps = 1e-6;
  hp.weight_decay = 0.1;
  hp.grad_scale = 0.5;
  for (int64_t step = 1; step <= 3; ++step) {
    hp.step = step;
    Tensor grad = test::random_tensor(gen, {n}, dt, 2.0);
    const std::vector<double> g = grad.to_doubles();
    ops::adamw_step(param, grad, exp_avg, exp_avg_sq, hp);
    for (int64_t i = 0; i < n; ++i) ref[size_t(i)].step(g[size_t(i)], hp);
    std::vector<double> p_ref, m_ref, v_ref;
    for (const ScalarAdamW& r : ref) {
      p_ref.push_back(r.p);
      m_ref.push_back(r.m);
      v_ref.push_back(r.v);
    }
    EXPECT_LT(test::relative_error(param.to_doubles(), p_ref), tol) << dtype_name(dt) << " step " << step;
    EXPECT_LT(test::relative_error(exp_avg.to_doubles(), m_ref), tol) << dtype_name(dt) << " step " << step;
    EXPECT_LT(test::relative_error(exp_avg_sq.to_doubles(), v_ref), tol) << dtype_name(dt) << " step " << step;
  }
}

TEST(OpsAdamW, Float64MatchesTorchFormulaOverThreeSteps) { run_three_steps(DType::F64, 1e-14); }

TEST(OpsAdamW, Float32MatchesTorchFormulaOverThreeSteps) { run_three_steps(DType::F32, 1e-6); }

TEST(OpsAdamW, RejectsBadArguments) {
  Tensor p = Tensor::zeros({4}, DType::F64), g = Tensor::zeros({4}, DType::F64);
  Tensor m = Tensor::zeros({4}, DType::F64), v = Tensor::zeros({4}, DType::F64);
  ops::AdamWParams hp;
  EXPECT_NO_THROW(ops::adamw_step(p, g, m, v, hp));
  Tensor g_bad = Tensor::zeros({5}, DType::F64);
  EXPECT_THROW(ops::adamw_step(p, g_bad, m, v, hp), Error);
  Tensor v_bad = Tensor::zeros({2, 2}, DType::F64);
  EXPECT_THROW(ops::adamw_step(p, g, m, v_bad, hp), Error);
  Tensor g32 = Tensor::zeros({4}, DType::F32);
  EXPECT_THROW(ops::adamw_step(p, g32, m, v, hp), Error);  // CPU: one dtype per call
  hp.step = 0;
  EXPECT_THROW(ops::adamw_step(p, g, m, v, hp), Error);
  hp.step = 1;
  hp.beta2 = 1.0;
  EXPECT_THROW(ops::adamw_step(p, g, m, v, hp), Error);
}

}  // namespace
}  // namespace bb
