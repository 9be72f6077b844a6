// Tests of the residual add with RMSNorm on the CPU: the bits of add then
// rmsnorm_forward, and of rmsnorm_backward then add_ (float32 and float64);
// the pair's backward (x, branch and accumulated w gradients of a loss on
// both y and h) against finite differences; one profile line each, in the
// norm group; errors that name the op and the tensor.
#include <gtest/gtest.h>

#include <string>

#include "bumblebee/ops/op_profile.h"
#include "bumblebee/ops/ops.h"
#include "finite_difference.h"
#include "op_error.h"

namespace bb {
namespace {

using test::error_of;

constexpr double kEps = 1e-6;

TEST(OpsAddRMSNorm, ForwardIsAddThenRmsnormBitForBit) {
  const Shape shape{5, 12};
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(91);
    Tensor x = test::random_tensor(gen, shape, dt, 3.0), branch = test::random_tensor(gen, shape, dt, 0.7);
    Tensor w = test::random_tensor(gen, {12}, dt);
    Tensor h = Tensor::empty(shape, dt), y = Tensor::empty(shape, dt), rstd = Tensor::empty({5}, dt);
    ops::add_rmsnorm_forward(x, branch, w, kEps, h, y, rstd);
    Tensor h_ref = Tensor::empty(shape, dt), y_ref = Tensor::empty(shape, dt), rstd_ref = Tensor::empty({5}, dt);
    ops::add(x, branch, h_ref);
    ops::rmsnorm_forward(h_ref, w, kEps, y_ref, rstd_ref);
    EXPECT_EQ(h.to_doubles(), h_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(y.to_doubles(), y_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(rstd.to_doubles(), rstd_ref.to_doubles()) << dtype_name(dt);
  }
}

TEST(OpsAddRMSNorm, BackwardIsRmsnormBackwardThenAddBitForBit) {
  const Shape shape{2, 3, 10};   // any leading rows, as rmsnorm_backward takes them
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(92);
    Tensor x = test::random_tensor(gen, shape, dt), w = test::random_tensor(gen, {10}, dt);
    Tensor dy = test::random_tensor(gen, shape, dt), residual_grad = test::random_tensor(gen, shape, dt, 5.0);
    Tensor y = Tensor::empty(shape, dt), rstd = Tensor::empty({6}, dt);
    ops::rmsnorm_forward(x, w, kEps, y, rstd);
    // dw accumulates: both start from the same nonzero values.
    Tensor dw = test::random_tensor(gen, {10}, dt), dw_ref = Tensor::from_doubles(dw.to_doubles(), {10}, dt);
    Tensor dx = Tensor::empty(shape, dt), dx_ref = Tensor::empty(shape, dt);
    ops::add_rmsnorm_backward(dy, x, w, rstd, residual_grad, dx, dw);
    ops::rmsnorm_backward(dy, x, w, rstd, dx_ref, dw_ref);
    ops::add_(dx_ref, residual_grad);
    EXPECT_EQ(dx.to_doubles(), dx_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(dw.to_doubles(), dw_ref.to_doubles()) << dtype_name(dt);
  }
}

// loss = p . y + q . h with h = x + branch and y = rmsnorm(h): the gradient
// of x and of branch is add_rmsnorm_backward(dy = p, residual_grad = q), the
// gradient q of h's other use (the residual stream going on).
TEST(OpsAddRMSNorm, BackwardMatchesFiniteDifferences) {
  Generator gen(93);
  const Shape shape{3, 8};
  Tensor x = test::random_tensor(gen, shape), branch = test::random_tensor(gen, shape, DType::F64, 0.5);
  Tensor w = test::random_tensor(gen, {8});
  const std::vector<double> p = test::random_vector(gen, 24), q = test::random_vector(gen, 24);
  Tensor h = Tensor::empty(shape, DType::F64), y = Tensor::empty(shape, DType::F64);
  Tensor rstd = Tensor::empty({3}, DType::F64);
  auto loss = [&] {
    ops::add_rmsnorm_forward(x, branch, w, kEps, h, y, rstd);
    return test::project(y, p) + test::project(h, q);
  };
  const std::vector<double> num_dx = test::numeric_gradient(loss, x);
  const std::vector<double> num_dbranch = test::numeric_gradient(loss, branch);
  const std::vector<double> num_dw = test::numeric_gradient(loss, w);

  ops::add_rmsnorm_forward(x, branch, w, kEps, h, y, rstd);
  Tensor dy = Tensor::from_doubles(p, shape, DType::F64), residual_grad = Tensor::from_doubles(q, shape, DType::F64);
  Tensor dh = Tensor::empty(shape, DType::F64);
  Tensor dw = test::random_tensor(gen, {8});
  const std::vector<double> dw_before = dw.to_doubles();
  ops::add_rmsnorm_backward(dy, h, w, rstd, residual_grad, dh, dw);
  EXPECT_LT(test::relative_error(dh.to_doubles(), num_dx), 1e-6);
  EXPECT_LT(test::relative_error(dh.to_doubles(), num_dbranch), 1e-6);
  EXPECT_LT(test::relative_error(test::subtract(dw.to_doubles(), dw_before), num_dw), 1e-6);
}

// Each direction is one op of its own in the profile, in the norm group (the
// two ops it runs on the CPU are not counted again).
TEST(OpsAddRMSNorm, ProfileCountsEachDirectionOnceAsANorm) {
  const Shape shape{3, 4};
  Generator gen(94);
  Tensor x = test::random_tensor(gen, shape, DType::F32), branch = test::random_tensor(gen, shape, DType::F32);
  Tensor w = test::random_tensor(gen, {4}, DType::F32);
  Tensor h = Tensor::empty(shape, DType::F32), y = Tensor::empty(shape, DType::F32);
  Tensor rstd = Tensor::empty({3}, DType::F32);
  Tensor dx = Tensor::empty(shape, DType::F32), dw = Tensor::zeros({4}, DType::F32);
  ops::profile::take();
  ops::profile::set_enabled(true);
  ops::add_rmsnorm_forward(x, branch, w, kEps, h, y, rstd);
  ops::add_rmsnorm_backward(y, h, w, rstd, x, dx, dw);
  ops::profile::set_enabled(false);
  const std::vector<ops::profile::OpTime> t = ops::profile::take();
  ASSERT_EQ(t.size(), 2u);
  for (const ops::profile::OpTime& op : t) {
    EXPECT_TRUE(op.name == "add_rmsnorm_forward" || op.name == "add_rmsnorm_backward") << op.name;
    EXPECT_EQ(op.calls, 1) << op.name;
    EXPECT_EQ(op.group, "norm") << op.name;
  }
}

TEST(OpsAddRMSNorm, RejectsBadShapesDtypesAndAliasingNamingTheTensor) {
  const DType f64 = DType::F64;
  Tensor x = Tensor::zeros({3, 4}, f64), branch = Tensor::zeros({3, 4}, f64), w = Tensor::zeros({4}, f64);
  Tensor h = Tensor::zeros({3, 4}, f64), y = Tensor::zeros({3, 4}, f64), rstd = Tensor::zeros({3}, f64);
  auto forward = [&](const Tensor& bb, const Tensor& ww, Tensor hh, Tensor yy, Tensor rr) {
    return error_of([&] { ops::add_rmsnorm_forward(x, bb, ww, kEps, hh, yy, rr); });
  };
  EXPECT_NE(forward(Tensor::zeros({3, 5}, f64), w, h, y, rstd).find("'branch' has shape [3, 5], expected [3, 4]"),
            std::string::npos);
  EXPECT_NE(forward(branch, w, Tensor::zeros({4, 3}, f64), y, rstd).find("'h' has shape [4, 3], expected [3, 4]"),
            std::string::npos);
  EXPECT_NE(forward(branch, w, h, Tensor::zeros({12}, f64), rstd).find("'y'"), std::string::npos);
  EXPECT_NE(forward(branch, Tensor::zeros({5}, f64), h, y, rstd).find("'w' has shape [5], expected [4]"),
            std::string::npos);
  EXPECT_NE(forward(branch, w, h, y, Tensor::zeros({4}, f64)).find("'rstd' has shape [4], expected [3]"),
            std::string::npos);
  EXPECT_NE(forward(branch.to(DType::F32), w, h, y, rstd).find("'branch' is float32"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::add_rmsnorm_forward(x, branch, w, -1.0, h, y, rstd); }).find("eps is negative"),
            std::string::npos);
  const std::string message = forward(branch, w, h, y, Tensor::zeros({4}, f64));
  EXPECT_EQ(message.rfind("add_rmsnorm_forward: ", 0), 0u) << message;
  EXPECT_EQ(forward(branch, w, h, y, rstd), "");

  Tensor dy = Tensor::zeros({3, 4}, f64), residual_grad = Tensor::zeros({3, 4}, f64);
  Tensor dx = Tensor::zeros({3, 4}, f64), dw = Tensor::zeros({4}, f64);
  auto backward = [&](const Tensor& rg, Tensor ddx, Tensor ddw) {
    return error_of([&] { ops::add_rmsnorm_backward(dy, x, w, rstd, rg, ddx, ddw); });
  };
  EXPECT_NE(backward(Tensor::zeros({3, 3}, f64), dx, dw).find("'residual_grad' has shape [3, 3], expected [3, 4]"),
            std::string::npos);
  EXPECT_NE(backward(residual_grad, Tensor::zeros({3, 2}, f64), dw).find("'dx'"), std::string::npos);
  EXPECT_NE(backward(residual_grad, dx, Tensor::zeros({3}, f64)).find("'dw' has shape [3], expected [4]"),
            std::string::npos);
  EXPECT_NE(backward(residual_grad.to(DType::F32), dx, dw).find("'residual_grad' is float32"), std::string::npos);
  // dx written over the residual gradient would lose it before it is added.
  EXPECT_NE(backward(dx, dx, dw).find("'dx' overlaps 'residual_grad'"), std::string::npos);
  Tensor both = Tensor::zeros({6, 4}, f64);
  EXPECT_NE(backward(both.narrow(1, 3), both.narrow(0, 3), dw).find("overlaps"), std::string::npos);
  EXPECT_EQ(backward(both.narrow(3, 3), both.narrow(0, 3), dw), "");
  EXPECT_EQ(backward(residual_grad, dx, Tensor::zeros({3}, f64)).rfind("add_rmsnorm_backward: ", 0), 0u);
  EXPECT_EQ(backward(residual_grad, dx, dw), "");
}

}  // namespace
}  // namespace bb
