// Tests of RMSNorm then RoPE as one op on the CPU: the bits of the two ops in
// sequence (forward and backward, float32 and float64), backward (dx,
// accumulated dw) against finite differences, one line each in the op
// profile, and errors that name the op and the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "bumblebee/ops/op_profile.h"
#include "bumblebee/ops/ops.h"
#include "op_error.h"
#include "finite_difference.h"

namespace bb {
namespace {

using test::error_of;

constexpr double kEps = 1e-6;

Tensor inv_freq_for(int64_t head_dim, double base) {
  std::vector<double> f(size_t(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(base, double(2 * i) / double(head_dim));
  return Tensor::from_doubles(f, {head_dim / 2}, DType::F64);
}

Tensor positions(const std::vector<int64_t>& p, DType dt) {
  return Tensor::from_doubles(std::vector<double>(p.begin(), p.end()), {int64_t(p.size())}, dt);
}

TEST(OpsRMSNormRoPE, ForwardIsRmsnormThenRopeBitForBit) {
  const Shape shape{4, 3, 8};
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(81);
    Tensor x = test::random_tensor(gen, shape, dt, 2.0), w = test::random_tensor(gen, {8}, dt);
    Tensor ids = positions({0, 5, 4095, 17}, DType::I64), inv_freq = inv_freq_for(8, 1e6);
    Tensor y = Tensor::empty(shape, dt), rstd = Tensor::empty({12}, dt);
    ops::rmsnorm_rope_forward(x, w, kEps, ids, inv_freq, y, rstd);
    Tensor normed = Tensor::empty(shape, dt), rotated = Tensor::empty(shape, dt), rstd_ref = Tensor::empty({12}, dt);
    ops::rmsnorm_forward(x, w, kEps, normed, rstd_ref);
    ops::rope_forward(normed, ids, inv_freq, rotated);
    EXPECT_EQ(y.to_doubles(), rotated.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(rstd.to_doubles(), rstd_ref.to_doubles()) << dtype_name(dt);
  }
}

TEST(OpsRMSNormRoPE, BackwardIsRopeBackwardThenRmsnormBackwardBitForBit) {
  const Shape shape{3, 2, 6};
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(82);
    Tensor x = test::random_tensor(gen, shape, dt), w = test::random_tensor(gen, {6}, dt);
    Tensor dy = test::random_tensor(gen, shape, dt);
    Tensor ids = positions({3, 0, 9}, DType::I32), inv_freq = inv_freq_for(6, 100.0);
    Tensor y = Tensor::empty(shape, dt), rstd = Tensor::empty({6}, dt);
    ops::rmsnorm_rope_forward(x, w, kEps, ids, inv_freq, y, rstd);
    // dw accumulates: both start from the same nonzero values.
    Tensor dw = test::random_tensor(gen, {6}, dt), dw_ref = Tensor::from_doubles(dw.to_doubles(), {6}, dt);
    Tensor dx = Tensor::empty(shape, dt), dx_ref = Tensor::empty(shape, dt), dnorm = Tensor::empty(shape, dt);
    ops::rmsnorm_rope_backward(dy, x, w, rstd, ids, inv_freq, dx, dw);
    ops::rope_backward(dy, ids, inv_freq, dnorm);
    ops::rmsnorm_backward(dnorm, x, w, rstd, dx_ref, dw_ref);
    EXPECT_EQ(dx.to_doubles(), dx_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(dw.to_doubles(), dw_ref.to_doubles()) << dtype_name(dt);
  }
}

TEST(OpsRMSNormRoPE, BackwardMatchesFiniteDifferences) {
  Generator gen(83);
  const Shape shape{3, 2, 8};
  Tensor x = test::random_tensor(gen, shape), w = test::random_tensor(gen, {8});
  Tensor ids = positions({5, 0, 12}, DType::I64), inv_freq = inv_freq_for(8, 100.0);
  const std::vector<double> proj = test::random_vector(gen, 48);
  Tensor y = Tensor::empty(shape, DType::F64), rstd = Tensor::empty({6}, DType::F64);
  auto loss = [&] {
    ops::rmsnorm_rope_forward(x, w, kEps, ids, inv_freq, y, rstd);
    return test::project(y, proj);
  };
  const std::vector<double> num_dx = test::numeric_gradient(loss, x);
  const std::vector<double> num_dw = test::numeric_gradient(loss, w);

  ops::rmsnorm_rope_forward(x, w, kEps, ids, inv_freq, y, rstd);
  Tensor dy = Tensor::from_doubles(proj, shape, DType::F64);
  Tensor dx = Tensor::empty(shape, DType::F64);
  Tensor dw = test::random_tensor(gen, {8});
  const std::vector<double> dw_before = dw.to_doubles();
  ops::rmsnorm_rope_backward(dy, x, w, rstd, ids, inv_freq, dx, dw);
  EXPECT_LT(test::relative_error(dx.to_doubles(), num_dx), 1e-6);
  EXPECT_LT(test::relative_error(test::subtract(dw.to_doubles(), dw_before), num_dw), 1e-6);
}

// Each direction is one op of its own in the profile, in the norm group (the
// two ops it runs on the CPU are not counted again).
TEST(OpsRMSNormRoPE, ProfileCountsEachDirectionOnceAsANorm) {
  const Shape shape{2, 2, 4};
  Generator gen(84);
  Tensor x = test::random_tensor(gen, shape, DType::F32), w = test::random_tensor(gen, {4}, DType::F32);
  Tensor ids = positions({1, 2}, DType::I64), inv_freq = inv_freq_for(4, 1e4);
  Tensor y = Tensor::empty(shape, DType::F32), rstd = Tensor::empty({4}, DType::F32);
  Tensor dx = Tensor::empty(shape, DType::F32), dw = Tensor::zeros({4}, DType::F32);
  ops::profile::take();
  ops::profile::set_enabled(true);
  ops::rmsnorm_rope_forward(x, w, kEps, ids, inv_freq, y, rstd);
  ops::rmsnorm_rope_backward(y, x, w, rstd, ids, inv_freq, dx, dw);
  ops::profile::set_enabled(false);
  const std::vector<ops::profile::OpTime> t = ops::profile::take();
  ASSERT_EQ(t.size(), 2u);
  for (const ops::profile::OpTime& op : t) {
    EXPECT_TRUE(op.name == "rmsnorm_rope_forward" || op.name == "rmsnorm_rope_backward") << op.name;
    EXPECT_EQ(op.calls, 1) << op.name;
    EXPECT_EQ(op.group, "norm") << op.name;
  }
}

TEST(OpsRMSNormRoPE, RejectsBadShapesAndDtypesNamingTheTensor) {
  const DType f64 = DType::F64;
  Tensor x = Tensor::zeros({2, 3, 4}, f64), w = Tensor::zeros({4}, f64), y = Tensor::zeros({2, 3, 4}, f64);
  Tensor rstd = Tensor::zeros({6}, f64), ids = positions({0, 1}, DType::I64), inv_freq = inv_freq_for(4, 1e4);
  auto forward = [&](const Tensor& xx, const Tensor& ww, const Tensor& pp, const Tensor& ff, Tensor yy, Tensor rr) {
    return error_of([&] { ops::rmsnorm_rope_forward(xx, ww, kEps, pp, ff, yy, rr); });
  };
  EXPECT_NE(forward(x, Tensor::zeros({5}, f64), ids, inv_freq, y, rstd).find("'w' has shape [5], expected [4]"),
            std::string::npos);
  EXPECT_NE(forward(x, w, ids, inv_freq, y, Tensor::zeros({2}, f64)).find("'rstd' has shape [2], expected [6]"),
            std::string::npos);
  EXPECT_NE(forward(x, w, ids, inv_freq, Tensor::zeros({2, 3, 6}, f64), rstd).find("'y'"), std::string::npos);
  Tensor flat = Tensor::zeros({6, 4}, f64);
  EXPECT_NE(forward(flat, w, ids, inv_freq, flat, rstd).find("'x' must be 3-D"), std::string::npos);
  EXPECT_NE(forward(x, w, positions({0, 1, 2}, DType::I64), inv_freq, y, rstd).find("'position_ids'"),
            std::string::npos);
  EXPECT_NE(forward(x, w, ids, inv_freq.to(DType::F32), y, rstd).find("'inv_freq' must be float64"),
            std::string::npos);
  EXPECT_NE(forward(x, w.to(DType::F32), ids, inv_freq, y, rstd).find("'w' is float32"), std::string::npos);
  const std::string message = forward(x, w, ids, inv_freq.to(DType::F32), y, rstd);
  EXPECT_EQ(message.rfind("rmsnorm_rope_forward: ", 0), 0u) << message;

  Tensor dx = Tensor::zeros({2, 3, 4}, f64), dw = Tensor::zeros({4}, f64);
  auto backward = [&](const Tensor& dy, const Tensor& xx, Tensor ddx, Tensor ddw) {
    return error_of([&] { ops::rmsnorm_rope_backward(dy, xx, w, rstd, ids, inv_freq, ddx, ddw); });
  };
  EXPECT_NE(backward(y, Tensor::zeros({2, 3, 2}, f64), dx, dw).find("'x' has shape [2, 3, 2], expected [2, 3, 4]"),
            std::string::npos);
  EXPECT_NE(backward(y, x, Tensor::zeros({2, 3, 2}, f64), dw).find("'dx'"), std::string::npos);
  EXPECT_NE(backward(y, x, dx, Tensor::zeros({3}, f64)).find("'dw' has shape [3], expected [4]"), std::string::npos);
  EXPECT_EQ(backward(y, x, dx, Tensor::zeros({3}, f64)).rfind("rmsnorm_rope_backward: ", 0), 0u);
  EXPECT_EQ(backward(y, x, dx, dw), "");
}

}  // namespace
}  // namespace bb
