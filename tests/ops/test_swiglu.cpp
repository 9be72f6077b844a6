// Tests of SwiGLU on the CPU: forward against silu(gate) * up written out,
// backward against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"

namespace bb {
namespace {

TEST(OpsSwiGLU, ForwardMatchesNaive) {
  for (DType dt : {DType::F64, DType::F32}) {
    Generator gen(61);
    const int64_t rows = 3, f = 5;
    Tensor gate_up = test::random_tensor(gen, {rows, 2 * f}, dt, 3.0);
    Tensor out = Tensor::empty({rows, f}, dt);
    ops::swiglu_forward(gate_up, out);
    const std::vector<double> gu = gate_up.to_doubles();
    std::vector<double> expected(size_t(rows * f));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) {
        const double g = gu[size_t(r * 2 * f + j)], u = gu[size_t(r * 2 * f + f + j)];
        expected[size_t(r * f + j)] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    EXPECT_LT(test::relative_error(out.to_doubles(), expected), dt == DType::F64 ? 1e-15 : 1e-6);
  }
}

TEST(OpsSwiGLU, BackwardMatchesFiniteDifferences) {
  Generator gen(62);
  const int64_t rows = 4, f = 3;
  Tensor gate_up = test::random_tensor(gen, {rows, 2 * f}, DType::F64, 2.0);
  const std::vector<double> proj = test::random_vector(gen, size_t(rows * f));
  Tensor out = Tensor::empty({rows, f}, DType::F64);
  auto loss = [&] {
    ops::swiglu_forward(gate_up, out);
    return test::project(out, proj);
  };
  const std::vector<double> numeric = test::numeric_gradient(loss, gate_up);
  Tensor d_gate_up = Tensor::empty({rows, 2 * f}, DType::F64);
  ops::swiglu_backward(Tensor::from_doubles(proj, {rows, f}, DType::F64), gate_up, d_gate_up);
  EXPECT_LT(test::relative_error(d_gate_up.to_doubles(), numeric), 1e-6);
}

TEST(OpsSwiGLU, RejectsBadShapes) {
  Tensor odd = Tensor::zeros({2, 5}, DType::F64), out = Tensor::zeros({2, 2}, DType::F64);
  EXPECT_THROW(ops::swiglu_forward(odd, out), Error);
  Tensor gate_up = Tensor::zeros({2, 6}, DType::F64);
  EXPECT_THROW(ops::swiglu_forward(gate_up, out), Error);  // out must be [2, 3]
  Tensor dout = Tensor::zeros({2, 3}, DType::F64), dgu_bad = Tensor::zeros({2, 3}, DType::F64);
  EXPECT_THROW(ops::swiglu_backward(dout, gate_up, dgu_bad), Error);
}

}  // namespace
}  // namespace bb
