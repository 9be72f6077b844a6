// The op profile counts each call of an op under its label, times it, and
// records nothing while off.
#include <gtest/gtest.h>

#include "bumblebee/ops/op_profile.h"
#include "bumblebee/ops/ops.h"

namespace bb {
namespace {

Tensor ones(const Shape& shape) {
  return Tensor::from_doubles(std::vector<double>(size_t(shape_numel(shape)), 1.0), shape, DType::F32);
}

const ops::profile::OpTime* find(const std::vector<ops::profile::OpTime>& t, const std::string& name) {
  for (const auto& e : t)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(OpProfile, RecordsNothingWhileOff) {
  ops::profile::take();
  Tensor a = ones({4, 5}), b = ones({5, 6});
  Tensor c = Tensor::zeros({4, 6}, DType::F32);
  ops::matmul(a, false, b, false, c);
  EXPECT_TRUE(ops::profile::take().empty());
}

TEST(OpProfile, CountsCallsPerLabelAndTimesThem) {
  ops::profile::take();
  ops::profile::set_enabled(true);
  Tensor a = ones({64, 48}), b = ones({32, 48});
  Tensor c = Tensor::zeros({64, 32}, DType::F32);
  for (int i = 0; i < 3; ++i) ops::matmul(a, false, b, true, c);
  Tensor w = ones({48}), y = Tensor::zeros({64, 48}, DType::F32);
  Tensor rstd = Tensor::zeros({64}, DType::F32);
  ops::rmsnorm_forward(a, w, 1e-6, y, rstd);
  ops::profile::set_enabled(false);
  ops::matmul(a, false, b, true, c);   // after profiling stopped: not counted

  const std::vector<ops::profile::OpTime> t = ops::profile::take();
  ASSERT_EQ(t.size(), 2u);
  const auto* mm = find(t, "matmul 64x32x48 NT");
  const auto* norm = find(t, "rmsnorm_forward");
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(mm->calls, 3);
  EXPECT_EQ(norm->calls, 1);
  EXPECT_GT(mm->ms, 0.0);
  EXPECT_FALSE(mm->communication);
  EXPECT_EQ(mm->group, "gemm");
  EXPECT_EQ(mm->flops, 3 * 2.0 * 64 * 32 * 48);
  EXPECT_EQ(norm->group, "norm");
  EXPECT_EQ(norm->flops, 0.0);
  EXPECT_GE(t[0].ms, t[1].ms);   // largest first
  EXPECT_TRUE(ops::profile::take().empty());   // take() starts a new tally
}

TEST(OpProfile, AnOpThatThrowsStillClosesItsRecord) {
  ops::profile::take();
  ops::profile::set_enabled(true);
  Tensor a = ones({4, 5}), b = ones({4, 6});
  Tensor c = Tensor::zeros({4, 6}, DType::F32);
  EXPECT_THROW(ops::matmul(a, false, b, false, c), Error);   // inner sizes differ: rejected before it runs
  Tensor d = ones({5, 6});
  ops::matmul(a, false, d, false, c);
  ops::profile::set_enabled(false);
  const auto t = ops::profile::take();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "matmul 4x6x5 NN");
}

}  // namespace
}  // namespace bb
