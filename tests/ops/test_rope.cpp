// Tests of rotary position embedding on the CPU: forward against HF's
// x * cos + rotate_half(x) * sin, in-place use, backward against finite
// differences, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

Tensor inv_freq_for(int64_t head_dim, double base = 10000.0) {
  std::vector<double> f(size_t(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(base, double(2 * i) / double(head_dim));
  return Tensor::from_doubles(f, {head_dim / 2}, DType::F64);
}

// HF form: cos and sin repeated over both halves, rotate_half(x) = cat(-x2, x1).
std::vector<double> naive_rope(const Tensor& x, const std::vector<int64_t>& pos, const Tensor& inv_freq) {
  const std::vector<double> vx = x.to_doubles(), f = inv_freq.to_doubles();
  const int64_t tokens = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  std::vector<double> out(vx.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = size_t((t * heads + h) * d);
      for (int64_t i = 0; i < d; ++i) {
        const double angle = double(pos[size_t(t)]) * f[size_t(i % half)];
        const double rotated = i < half ? -vx[base + size_t(i + half)] : vx[base + size_t(i - half)];
        out[base + size_t(i)] = vx[base + size_t(i)] * std::cos(angle) + rotated * std::sin(angle);
      }
    }
  }
  return out;
}

Tensor positions(const std::vector<int64_t>& p, DType dt) {
  return Tensor::from_doubles(std::vector<double>(p.begin(), p.end()), {int64_t(p.size())}, dt);
}

TEST(OpsRoPE, ForwardMatchesHfFormulation) {
  const std::vector<int64_t> pos{0, 1, 7, 4095, 131071};  // far positions need the double angle
  const Tensor inv_freq = inv_freq_for(6);
  for (DType dt : {DType::F64, DType::F32}) {
    for (DType pdt : {DType::I32, DType::I64}) {
      Generator gen(71);
      Tensor x = test::random_tensor(gen, {5, 3, 6}, dt);
      Tensor out = Tensor::empty({5, 3, 6}, dt);
      ops::rope_forward(x, positions(pos, pdt), inv_freq, out);
      EXPECT_LT(test::relative_error(out.to_doubles(), naive_rope(x, pos, inv_freq)), dt == DType::F64 ? 1e-14 : 1e-6)
          << dtype_name(dt);
    }
  }
}

TEST(OpsRoPE, InPlaceEqualsOutOfPlace) {
  Generator gen(72);
  Tensor x = test::random_tensor(gen, {4, 2, 8});
  Tensor ids = positions({3, 1, 4, 1}, DType::I64), inv_freq = inv_freq_for(8);
  Tensor out = Tensor::empty({4, 2, 8}, DType::F64);
  ops::rope_forward(x, ids, inv_freq, out);
  ops::rope_forward(x, ids, inv_freq, x);
  EXPECT_EQ(x.to_doubles(), out.to_doubles());
  ops::rope_backward(x, ids, inv_freq, x);  // the inverse rotation, also in place
  Tensor fresh = Tensor::empty({4, 2, 8}, DType::F64);
  ops::rope_backward(out, ids, inv_freq, fresh);
  EXPECT_EQ(x.to_doubles(), fresh.to_doubles());
}

TEST(OpsRoPE, BackwardMatchesFiniteDifferences) {
  Generator gen(73);
  const Shape shape{3, 2, 4};
  Tensor x = test::random_tensor(gen, shape);
  Tensor ids = positions({5, 0, 12}, DType::I32), inv_freq = inv_freq_for(4, 100.0);
  const std::vector<double> proj = test::random_vector(gen, 24);
  Tensor out = Tensor::empty(shape, DType::F64);
  auto loss = [&] {
    ops::rope_forward(x, ids, inv_freq, out);
    return test::project(out, proj);
  };
  const std::vector<double> numeric = test::numeric_gradient(loss, x);
  Tensor dx = Tensor::empty(shape, DType::F64);
  ops::rope_backward(Tensor::from_doubles(proj, shape, DType::F64), ids, inv_freq, dx);
  EXPECT_LT(test::relative_error(dx.to_doubles(), numeric), 1e-6);
}

TEST(OpsRoPE, RejectsBadShapesAndDtypes) {
  Tensor x = Tensor::zeros({2, 1, 4}, DType::F64), out = Tensor::zeros({2, 1, 4}, DType::F64);
  Tensor ids = positions({0, 1}, DType::I64);
  EXPECT_THROW(ops::rope_forward(x, ids, inv_freq_for(6), out), Error);  // inv_freq length 3, not 2
  EXPECT_THROW(ops::rope_forward(x, ids, inv_freq_for(4).to(DType::F32), out), Error);
  EXPECT_THROW(ops::rope_forward(x, positions({0, 1, 2}, DType::I64), inv_freq_for(4), out), Error);
  EXPECT_THROW(ops::rope_forward(x, ids.to(DType::F64), inv_freq_for(4), out), Error);
  Tensor odd = Tensor::zeros({2, 1, 5}, DType::F64), odd_out = Tensor::zeros({2, 1, 5}, DType::F64);
  EXPECT_THROW(ops::rope_forward(odd, ids, inv_freq_for(4), odd_out), Error);
  Tensor flat = Tensor::zeros({2, 4}, DType::F64), flat_out = Tensor::zeros({2, 4}, DType::F64);
  EXPECT_THROW(ops::rope_forward(flat, ids, inv_freq_for(4), flat_out), Error);
}

}  // namespace
}  // namespace bb
