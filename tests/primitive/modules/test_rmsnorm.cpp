// Tests of the RMSNorm module's residual add (forward_add) and residual
// gradient (backward with residual_grad) in float64 and float32 on the CPU:
// the bits of ops::add then forward, and of backward then ops::add_; Saved
// keeps h, so recompute gives the output again and backward the same
// gradients as after forward.
#include <gtest/gtest.h>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/rmsnorm.h"

#include "../../ops/finite_difference.h"

namespace bb {
namespace {

constexpr int64_t kRows = 6, kDim = 16;

struct Norm {
  ParamStore store;
  RMSNorm norm;
  explicit Norm(DType dt) : norm(store, "norm.weight", kDim, 1e-6) {
    store.allocate(dt, dt, Device::cpu());
    store.zero_grads();
    Generator gen(61);
    store.get("norm.weight").value.copy_from(test::random_tensor(gen, {kDim}, dt));
  }
  std::vector<double> weight_grad() { return store.get("norm.weight").grad.to_doubles(); }
};

TEST(RMSNormModule, ForwardAddAndResidualBackwardAreTheUnfusedModuleCallsBitForBit) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(62);
    const Shape shape{2, kRows / 2, kDim};
    Tensor x = test::random_tensor(gen, shape, dt, 2.0), branch = test::random_tensor(gen, shape, dt);
    Tensor dy = test::random_tensor(gen, shape, dt), residual_grad = test::random_tensor(gen, shape, dt);

    Norm fused(dt);
    RMSNorm::Saved s;
    Tensor h = Tensor::empty(shape, dt);
    const Tensor y = fused.norm.forward_add(x, branch, h, s);
    const Tensor y_again = fused.norm.recompute(s);
    const Tensor dx = fused.norm.backward(dy, s, residual_grad);

    Norm unfused(dt);
    RMSNorm::Saved s_ref;
    Tensor h_ref = Tensor::empty(shape, dt);
    ops::add(x, branch, h_ref);
    const Tensor y_ref = unfused.norm.forward(h_ref, s_ref);
    Tensor dx_ref = unfused.norm.backward(dy, s_ref);
    ops::add_(dx_ref, residual_grad);

    EXPECT_EQ(y.shape(), shape);
    EXPECT_EQ(dx.shape(), shape);
    EXPECT_EQ(h.to_doubles(), h_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(y.to_doubles(), y_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(y_again.to_doubles(), y.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(dx.to_doubles(), dx_ref.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(fused.weight_grad(), unfused.weight_grad()) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace bb
