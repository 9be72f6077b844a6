// Tests of the AdamW step on the CPU against a scalar transcription of
// torch.optim.AdamW (single tensor, no amsgrad, no maximize) over 3 steps,
// and of its storage dtypes (bfloat16 params, gradients, moments) against a
// scalar float32 reference that rounds where the op rounds, to the last bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "bumblebee/core/half.h"

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

// One element of the float32-compute step: loads widen exactly, every
// stored value rounds to its tensor's dtype once, the update uses the
// unrounded moments.
struct RoundingAdamW {
  DType p_dt, m_dt, v_dt;
  float p, m = 0.0f, v = 0.0f;

  static float round_to(DType dt, float x) { return dt == DType::BF16 ? bf16_to_float(float_to_bf16(x)) : x; }

  void step(float grad, const ops::AdamWParams& hp) {
    const double steps = double(hp.step);
    const float decay = float(1.0 - hp.lr * hp.weight_decay);
    const float step_size = float(hp.lr / (1.0 - std::pow(hp.beta1, steps)));
    const float bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(hp.beta2, steps)));
    const float g = grad * float(hp.grad_scale);
    float pi = p * decay;
    const float mi = float(hp.beta1) * m + float(1.0 - hp.beta1) * g;
    const float vi = float(hp.beta2) * v + float(1.0 - hp.beta2) * g * g;
    pi -= step_size * mi / (std::sqrt(vi) / bias_correction2_sqrt + float(hp.eps));
    p = round_to(p_dt, pi);
    m = round_to(m_dt, mi);
    v = round_to(v_dt, vi);
  }
};

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Every float32/bfloat16 storage combination of param, grad, exp_avg,
// exp_avg_sq, five steps, each value equal to the reference's bit for bit.
TEST(OpsAdamW, StorageDtypesMatchRoundingReferenceToTheLastBit) {
  const DType kinds[] = {DType::F32, DType::BF16};
  ops::AdamWParams hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  hp.grad_scale = 0.7;
  const int64_t n = 37;
  for (DType p_dt : kinds)
    for (DType g_dt : kinds)
      for (DType m_dt : kinds)
        for (DType v_dt : kinds) {
          const std::string label = std::string("param ") + dtype_name(p_dt) + " grad " + dtype_name(g_dt) +
                                    " exp_avg " + dtype_name(m_dt) + " exp_avg_sq " + dtype_name(v_dt);
          Generator gen(7);
          Tensor param = test::random_tensor(gen, {n}, DType::F32).to(p_dt);
          Tensor exp_avg = Tensor::zeros({n}, m_dt), exp_avg_sq = Tensor::zeros({n}, v_dt);
          std::vector<RoundingAdamW> ref;
          for (double p : param.to_doubles()) ref.push_back({p_dt, m_dt, v_dt, float(p)});
          for (int64_t step = 1; step <= 5; ++step) {
            hp.step = step;
            const Tensor grad = test::random_tensor(gen, {n}, DType::F32, 0.5).to(g_dt);
            const std::vector<double> g = grad.to_doubles();
            ops::adamw_step(param, grad, exp_avg, exp_avg_sq, hp);
            for (int64_t i = 0; i < n; ++i) ref[size_t(i)].step(float(g[size_t(i)]), hp);
            const std::vector<double> p = param.to_doubles(), m = exp_avg.to_doubles(), v = exp_avg_sq.to_doubles();
            for (int64_t i = 0; i < n; ++i) {
              const RoundingAdamW& r = ref[size_t(i)];
              ASSERT_EQ(bits_of(float(p[size_t(i)])), bits_of(r.p)) << label << " step " << step << " param " << i;
              ASSERT_EQ(bits_of(float(m[size_t(i)])), bits_of(r.m)) << label << " step " << step << " exp_avg " << i;
              ASSERT_EQ(bits_of(float(v[size_t(i)])), bits_of(r.v)) << label << " step " << step << " exp_avg_sq " << i;
            }
          }
        }
}

// bfloat16 moments really are rounded: a bf16 exp_avg differs from the
// float32 one after a step, and a bf16 param moves in bf16 steps.
TEST(OpsAdamW, Bfloat16MomentsDifferFromFloat32Moments) {
  Generator gen(3);
  const int64_t n = 64;
  const Tensor grad = test::random_tensor(gen, {n}, DType::F32);
  const Tensor start = test::random_tensor(gen, {n}, DType::F32);
  Tensor p32 = start.to(DType::F32), m32 = Tensor::zeros({n}, DType::F32), v32 = Tensor::zeros({n}, DType::F32);
  Tensor p16 = start.to(DType::F32), m16 = Tensor::zeros({n}, DType::BF16), v16 = Tensor::zeros({n}, DType::BF16);
  ops::AdamWParams hp;
  ops::adamw_step(p32, grad, m32, v32, hp);
  ops::adamw_step(p16, grad, m16, v16, hp);
  // The first step's update does not depend on the moments' rounding.
  EXPECT_EQ(p32.to_doubles(), p16.to_doubles());
  EXPECT_NE(m32.to_doubles(), m16.to_doubles());
  EXPECT_EQ(m16.to(DType::F32).to(DType::BF16).to_doubles(), m16.to_doubles());
}

TEST(OpsAdamW, RejectsStorageCombinationsItHasNoKernelFor) {
  ops::AdamWParams hp;
  Tensor p64 = Tensor::zeros({4}, DType::F64), g64 = Tensor::zeros({4}, DType::F64);
  Tensor m64 = Tensor::zeros({4}, DType::F64), v_bf16 = Tensor::zeros({4}, DType::BF16);
  EXPECT_THROW(ops::adamw_step(p64, g64, m64, v_bf16, hp), Error);   // float64 stays float64
  Tensor p32 = Tensor::zeros({4}, DType::F32), g32 = Tensor::zeros({4}, DType::F32);
  Tensor m32 = Tensor::zeros({4}, DType::F32), v_f16 = Tensor::zeros({4}, DType::F16);
  EXPECT_THROW(ops::adamw_step(p32, g32, m32, v_f16, hp), Error);
  EXPECT_THROW(ops::adamw_step(p32, g32, m32, m64, hp), Error);
}

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
