// Tests of the head-range ops on the CPU (ops::HeadsView: q, k or v inside a
// fused qkv): copy_heads both ways, RoPE and RMSNorm + RoPE reading x from
// heads of wider rows and writing dx into heads of wider rows, bit for bit
// the contiguous ops on the heads copied out (float32 and float64), backward
// against finite differences in float64, and errors that name the op and
// the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "bumblebee/ops/ops.h"
#include "finite_difference.h"
#include "op_error.h"

namespace bb {
namespace {

using test::error_of;

constexpr double kEps = 1e-6;
// qkv [T, Hq + 2 Hkv, D] with Hq = 4, Hkv = 2: q heads [0, 4), k [4, 6), v [6, 8).
constexpr int64_t kTokens = 3, kAll = 8, kDim = 6;

Tensor inv_freq_for(int64_t head_dim, double base) {
  std::vector<double> f(size_t(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0 / std::pow(base, double(2 * i) / double(head_dim));
  return Tensor::from_doubles(f, {head_dim / 2}, DType::F64);
}

Tensor positions() { return Tensor::from_doubles({7, 0, 4095}, {kTokens}, DType::I64); }

// Heads [first, first + count) of x, copied out by hand.
Tensor heads_of(const Tensor& x, int64_t first, int64_t count) {
  const std::vector<double> v = x.to_doubles();
  const int64_t all = x.size(1), dim = x.size(2);
  std::vector<double> out;
  for (int64_t t = 0; t < x.size(0); ++t) {
    for (int64_t h = first; h < first + count; ++h) {
      for (int64_t i = 0; i < dim; ++i) out.push_back(v[size_t((t * all + h) * dim + i)]);
    }
  }
  return Tensor::from_doubles(out, {x.size(0), count, dim}, x.dtype());
}

// before with heads [first, first + count) replaced by `heads`.
std::vector<double> with_heads(const Tensor& before, int64_t first, const Tensor& heads) {
  std::vector<double> v = before.to_doubles();
  const std::vector<double> h = heads.to_doubles();
  const int64_t all = before.size(1), count = heads.size(1), dim = before.size(2);
  for (int64_t t = 0; t < before.size(0); ++t) {
    for (int64_t j = 0; j < count * dim; ++j) v[size_t((t * all + first) * dim + j)] = h[size_t(t * count * dim + j)];
  }
  return v;
}

// Error messages end with the source location of the check.
bool starts_with(const std::string& message, const std::string& prefix) { return message.rfind(prefix, 0) == 0; }

Tensor copy_of(const Tensor& x) { return Tensor::from_doubles(x.to_doubles(), x.shape(), x.dtype()); }

TEST(OpsHeadsView, CopyHeadsCopiesOutAndInExactly) {
  Generator gen(91);
  Tensor qkv = test::random_tensor(gen, {kTokens, kAll, kDim}, DType::F32);
  Tensor k = Tensor::empty({kTokens, 2, kDim}, DType::F32);
  ops::copy_heads(ops::HeadsView{qkv, 4, 2}, k);
  EXPECT_EQ(k.to_doubles(), heads_of(qkv, 4, 2).to_doubles());
  Tensor d_qkv = test::random_tensor(gen, {kTokens, kAll, kDim}, DType::F32);
  const Tensor before = copy_of(d_qkv);
  ops::copy_heads(k, ops::HeadsView{d_qkv, 6, 2});
  EXPECT_EQ(d_qkv.to_doubles(), with_heads(before, 6, k));
}

// Forward reads q or k in place; backward writes dx into its heads of a
// d_qkv whose other heads keep their values.
TEST(OpsHeadsView, RopeOpsAreTheContiguousOpsOnTheHeads) {
  const Tensor inv_freq = inv_freq_for(kDim, 1e4);
  for (DType dt : {DType::F64, DType::F32}) {
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 4}, {4, 2}}) {
      Generator gen(92);
      Tensor qkv = test::random_tensor(gen, {kTokens, kAll, kDim}, dt);
      Tensor dy = test::random_tensor(gen, {kTokens, count, kDim}, dt);
      const Tensor x = heads_of(qkv, first, count);
      Tensor out = Tensor::empty(x.shape(), dt), out_ref = Tensor::empty(x.shape(), dt);
      ops::rope_forward(ops::HeadsView{qkv, first, count}, positions(), inv_freq, out);
      ops::rope_forward(x, positions(), inv_freq, out_ref);
      EXPECT_EQ(out.to_doubles(), out_ref.to_doubles()) << dtype_name(dt) << " heads from " << first;

      Tensor d_qkv = test::random_tensor(gen, {kTokens, kAll, kDim}, dt), dx_ref = Tensor::empty(x.shape(), dt);
      const Tensor before = copy_of(d_qkv);
      ops::rope_backward(dy, positions(), inv_freq, ops::HeadsView{d_qkv, first, count});
      ops::rope_backward(dy, positions(), inv_freq, dx_ref);
      EXPECT_EQ(d_qkv.to_doubles(), with_heads(before, first, dx_ref)) << dtype_name(dt) << " heads from " << first;
    }
  }
}

TEST(OpsHeadsView, RmsnormRopeOpsAreTheContiguousOpsOnTheHeads) {
  const Tensor inv_freq = inv_freq_for(kDim, 1e6);
  for (DType dt : {DType::F64, DType::F32}) {
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 4}, {4, 2}}) {
      Generator gen(93);
      Tensor qkv = test::random_tensor(gen, {kTokens, kAll, kDim}, dt, 2.0), w = test::random_tensor(gen, {kDim}, dt);
      Tensor dy = test::random_tensor(gen, {kTokens, count, kDim}, dt);
      const Tensor x = heads_of(qkv, first, count);
      const int64_t rows = kTokens * count;
      Tensor y = Tensor::empty(x.shape(), dt), y_ref = Tensor::empty(x.shape(), dt);
      Tensor rstd = Tensor::empty({rows}, dt), rstd_ref = Tensor::empty({rows}, dt);
      ops::rmsnorm_rope_forward(ops::HeadsView{qkv, first, count}, w, kEps, positions(), inv_freq, y, rstd);
      ops::rmsnorm_rope_forward(x, w, kEps, positions(), inv_freq, y_ref, rstd_ref);
      EXPECT_EQ(y.to_doubles(), y_ref.to_doubles()) << dtype_name(dt);
      EXPECT_EQ(rstd.to_doubles(), rstd_ref.to_doubles()) << dtype_name(dt);

      // x and dx inside tensors of different head counts; dw accumulates.
      Tensor d_wide = test::random_tensor(gen, {kTokens, kAll + 3, kDim}, dt), dx_ref = Tensor::empty(x.shape(), dt);
      const Tensor before = copy_of(d_wide);
      Tensor dw = test::random_tensor(gen, {kDim}, dt), dw_ref = copy_of(dw);
      ops::rmsnorm_rope_backward(dy, ops::HeadsView{qkv, first, count}, w, rstd, positions(), inv_freq,
                                 ops::HeadsView{d_wide, first + 1, count}, dw);
      ops::rmsnorm_rope_backward(dy, x, w, rstd, positions(), inv_freq, dx_ref, dw_ref);
      EXPECT_EQ(d_wide.to_doubles(), with_heads(before, first + 1, dx_ref)) << dtype_name(dt);
      EXPECT_EQ(dw.to_doubles(), dw_ref.to_doubles()) << dtype_name(dt);
    }
  }
}

// d(loss)/d(qkv) through the k heads: backward's d_qkv (zero elsewhere)
// against finite differences over the whole qkv.
TEST(OpsHeadsView, BackwardsMatchFiniteDifferences) {
  Generator gen(94);
  const int64_t first = 4, count = 2;
  Tensor qkv = test::random_tensor(gen, {kTokens, kAll, kDim}), w = test::random_tensor(gen, {kDim});
  const Tensor inv_freq = inv_freq_for(kDim, 100.0);
  const Shape xs{kTokens, count, kDim};
  const std::vector<double> proj = test::random_vector(gen, size_t(kTokens * count * kDim));
  const Tensor dy = Tensor::from_doubles(proj, xs, DType::F64);
  Tensor y = Tensor::empty(xs, DType::F64), rstd = Tensor::empty({kTokens * count}, DType::F64);

  auto rope_loss = [&] {
    ops::rope_forward(ops::HeadsView{qkv, first, count}, positions(), inv_freq, y);
    return test::project(y, proj);
  };
  Tensor d_qkv = Tensor::zeros({kTokens, kAll, kDim}, DType::F64);
  ops::rope_backward(dy, positions(), inv_freq, ops::HeadsView{d_qkv, first, count});
  EXPECT_LT(test::relative_error(d_qkv.to_doubles(), test::numeric_gradient(rope_loss, qkv)), 1e-6) << "rope";

  auto norm_loss = [&] {
    ops::rmsnorm_rope_forward(ops::HeadsView{qkv, first, count}, w, kEps, positions(), inv_freq, y, rstd);
    return test::project(y, proj);
  };
  const std::vector<double> num_dx = test::numeric_gradient(norm_loss, qkv);
  const std::vector<double> num_dw = test::numeric_gradient(norm_loss, w);
  ops::rmsnorm_rope_forward(ops::HeadsView{qkv, first, count}, w, kEps, positions(), inv_freq, y, rstd);
  d_qkv = Tensor::zeros({kTokens, kAll, kDim}, DType::F64);
  Tensor dw = Tensor::zeros({kDim}, DType::F64);
  ops::rmsnorm_rope_backward(dy, ops::HeadsView{qkv, first, count}, w, rstd, positions(), inv_freq,
                             ops::HeadsView{d_qkv, first, count}, dw);
  EXPECT_LT(test::relative_error(d_qkv.to_doubles(), num_dx), 1e-6) << "rmsnorm_rope dx";
  EXPECT_LT(test::relative_error(dw.to_doubles(), num_dw), 1e-6) << "rmsnorm_rope dw";
}

TEST(OpsHeadsView, RejectsBadViewsNamingTheOpAndTheTensor) {
  const DType f64 = DType::F64;
  Tensor qkv = Tensor::zeros({kTokens, kAll, kDim}, f64), w = Tensor::zeros({kDim}, f64);
  const Tensor inv_freq = inv_freq_for(kDim, 1e4);
  Tensor y = Tensor::zeros({kTokens, 2, kDim}, f64), rstd = Tensor::zeros({kTokens * 2}, f64);
  auto forward = [&](const ops::HeadsView& x, Tensor yy) {
    return error_of([&] { ops::rmsnorm_rope_forward(x, w, kEps, positions(), inv_freq, yy, rstd); });
  };
  EXPECT_EQ(forward({qkv, 4, 2}, y), "");
  EXPECT_PRED2(starts_with, forward({qkv, 7, 2}, y),
               "rmsnorm_rope_forward: heads [7, 9) of 'x' are not within its tensor's 8 heads (shape [3, 8, 6])");
  EXPECT_NE(forward({qkv, -1, 2}, y).find("heads [-1, 1) of 'x'"), std::string::npos);
  EXPECT_NE(forward({Tensor::zeros({kTokens, kAll * kDim}, f64), 0, 2}, y).find("'x' must be 3-D"),
            std::string::npos);
  EXPECT_NE(forward({qkv, 4, 3}, y).find("'y' has shape [3, 2, 6], expected [3, 3, 6]"), std::string::npos);
  EXPECT_NE(forward({qkv, 4, 2}, Tensor::zeros({kTokens, 2, kDim}, DType::F32)).find("'y' is float32"),
            std::string::npos);
  Tensor inside = qkv.flat_slice(0, {kTokens, 2, kDim});
  EXPECT_PRED2(starts_with, forward({qkv, 4, 2}, inside), "rmsnorm_rope_forward: tensor 'y' overlaps 'x'");

  Tensor dy = Tensor::zeros({kTokens, 2, kDim}, f64), d_qkv = Tensor::zeros({kTokens, kAll, kDim}, f64);
  Tensor dw = Tensor::zeros({kDim}, f64);
  auto backward = [&](const ops::HeadsView& x, const ops::HeadsView& dx) {
    return error_of([&] { ops::rmsnorm_rope_backward(dy, x, w, rstd, positions(), inv_freq, dx, dw); });
  };
  EXPECT_EQ(backward({qkv, 4, 2}, {d_qkv, 4, 2}), "");
  EXPECT_PRED2(starts_with, backward({qkv, 0, 4}, {d_qkv, 4, 2}),
               "rmsnorm_rope_backward: the heads of 'x' have shape [3, 4, 6], expected dy's [3, 2, 6]");
  EXPECT_NE(backward({qkv, 4, 2}, {d_qkv, 6, 3}).find("heads [6, 9) of 'dx'"), std::string::npos);
  EXPECT_PRED2(starts_with, backward({qkv, 4, 2}, {qkv, 0, 2}), "rmsnorm_rope_backward: tensor 'dx' overlaps 'x'");

  EXPECT_PRED2(starts_with,
               error_of([&] { ops::rope_backward(dy, positions(), inv_freq, ops::HeadsView{d_qkv, 0, 3}); }),
               "rope_backward: tensor 'dy' has shape [3, 2, 6], expected [3, 3, 6]");
  EXPECT_NE(error_of([&] { ops::rope_forward(ops::HeadsView{qkv, 0, 2}, Tensor::zeros({2}, DType::I64), inv_freq,
                                             y); })
                .find("rope_forward: tensor 'position_ids'"),
            std::string::npos);

  Tensor k32 = Tensor::zeros({kTokens, 2, kDim}, DType::F32);
  EXPECT_PRED2(starts_with, error_of([&] { ops::copy_heads(ops::HeadsView{qkv, 4, 2}, k32); }),
               "copy_heads: tensor 'dst' is float32 but 'src' is float64 (a copy keeps the dtype)");
  EXPECT_PRED2(starts_with,
               error_of([&] { ops::copy_heads(Tensor::zeros({kTokens, 3, kDim}, f64), ops::HeadsView{qkv, 6, 2}); }),
               "copy_heads: tensor 'src' has shape [3, 3, 6], expected [3, 2, 6]");
  EXPECT_NE(error_of([&] { ops::copy_heads(ops::HeadsView{Tensor(), 0, 1}, y); }).find("'src' is undefined"),
            std::string::npos);
}

}  // namespace
}  // namespace bb
