// Ring attention over cp = every rank of the launch (2, 4 and 8), float64:
// each rank holds the zigzag chunks of three packed GQA sequences; its out
// and lse equal the rows of plain causal attention over the whole batch, its
// dq, dk, dv the rows of the whole batch's backward, and those gradients
// equal float64 finite differences of the loss summed over all cp ranks.
#include <gtest/gtest.h>

#include "../ops/finite_difference.h"
#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/parallel/ring_attention.h"
#include "bumblebee/runtime/microbatch.h"
#include "tests/mpi/mpi_test_support.h"

namespace bb {
namespace {

// The v head dim differs from the q/k one, as in multi-head latent attention.
constexpr int64_t kHeadsQ = 4, kHeadsKv = 2, kHeadDim = 3, kHeadDimV = 2;
constexpr double kScale = 0.6;

// Rows `order` of t, a [T, H, D] or [T, H] tensor.
Tensor rows_of(const Tensor& t, const std::vector<int64_t>& order) {
  const std::vector<double> all = t.to_doubles();
  const int64_t row = t.numel() / t.size(0);
  std::vector<double> out;
  for (int64_t r : order) out.insert(out.end(), all.begin() + r * row, all.begin() + (r + 1) * row);
  Shape shape = t.shape();
  shape[0] = int64_t(order.size());
  return Tensor::from_doubles(out, shape, DType::F64);
}

struct RingCase {
  int cp, rank;
  std::vector<int32_t> cu;          // the whole batch
  std::vector<int64_t> order;       // this rank's tokens
  RingAttentionLayout layout;
  Tensor q, k, v, dout;             // the whole batch
};

RingCase make_case(dist::Communicator& cp) {
  RingCase c;
  c.cp = cp.size();
  c.rank = cp.rank();
  const int32_t unit = 2 * c.cp;
  c.cu = {0, 3 * unit, 4 * unit, 6 * unit};
  c.order = zigzag_token_order(c.cu, c.cp, c.rank);
  std::vector<int32_t> half;
  for (int32_t o : c.cu) half.push_back(o / unit);
  c.layout = {Tensor::from_vector(half, {int64_t(half.size())}), 3};
  const int64_t T = c.cu.back();
  Generator gen(7);   // the same batch on every rank
  c.q = test::random_tensor(gen, {T, kHeadsQ, kHeadDim});
  c.k = test::random_tensor(gen, {T, kHeadsKv, kHeadDim});
  c.v = test::random_tensor(gen, {T, kHeadsKv, kHeadDimV});
  c.dout = test::random_tensor(gen, {T, kHeadsQ, kHeadDimV});
  return c;
}

std::shared_ptr<dist::ParallelState> cp_over_world() {
  dist::GroupSizes sizes;
  sizes.cp = dist::World::instance().size();
  return dist::ParallelState::create(dist::World::instance(), sizes);
}

TEST(RingAttentionMpi, MatchesCausalAttentionOverTheWholeBatch) {
  auto state = cp_over_world();
  dist::Communicator& cp = state->cp();
  RingCase c = make_case(cp);
  const int64_t T = c.q.size(0);
  const Tensor cu = Tensor::from_vector(c.cu, {int64_t(c.cu.size())});
  Tensor out = Tensor::empty({T, kHeadsQ, kHeadDimV}, DType::F64), lse = Tensor::empty({T, kHeadsQ}, DType::F64);
  ops::attention_forward(c.q, c.k, c.v, cu, 6 * 2 * c.cp, kScale, out, lse);
  Tensor dq = Tensor::empty(c.q.shape(), DType::F64), dk = Tensor::empty(c.k.shape(), DType::F64),
         dv = Tensor::empty(c.v.shape(), DType::F64);
  ops::attention_backward(c.dout, c.q, c.k, c.v, out, lse, cu, 6 * 2 * c.cp, kScale, dq, dk, dv);

  Tensor lq = rows_of(c.q, c.order), lk = rows_of(c.k, c.order), lv = rows_of(c.v, c.order);
  const int64_t n = lq.size(0);
  Tensor l_out = Tensor::empty({n, kHeadsQ, kHeadDimV}, DType::F64), l_lse = Tensor::empty({n, kHeadsQ}, DType::F64);
  ring_attention_forward(lq, lk, lv, c.layout, kScale, cp, l_out, l_lse);
  Tensor l_dq = Tensor::empty(lq.shape(), DType::F64), l_dk = Tensor::empty(lk.shape(), DType::F64),
         l_dv = Tensor::empty(lv.shape(), DType::F64);
  ring_attention_backward(rows_of(c.dout, c.order), lq, lk, lv, l_out, l_lse, c.layout, kScale, cp, l_dq, l_dk, l_dv);

  EXPECT_LT(test::relative_error(l_out.to_doubles(), rows_of(out, c.order).to_doubles()), 1e-13);
  EXPECT_LT(test::relative_error(l_lse.to_doubles(), rows_of(lse, c.order).to_doubles()), 1e-13);
  EXPECT_LT(test::relative_error(l_dq.to_doubles(), rows_of(dq, c.order).to_doubles()), 1e-12);
  EXPECT_LT(test::relative_error(l_dk.to_doubles(), rows_of(dk, c.order).to_doubles()), 1e-12);
  EXPECT_LT(test::relative_error(l_dv.to_doubles(), rows_of(dv, c.order).to_doubles()), 1e-12);
}

// The loss sum over ranks of <out, dout>, differentiated by central
// differences in a few elements of the whole batch's q, k and v.
TEST(RingAttentionMpi, BackwardMatchesFiniteDifferences) {
  auto state = cp_over_world();
  dist::Communicator& cp = state->cp();
  RingCase c = make_case(cp);
  const Tensor l_dout = rows_of(c.dout, c.order);
  const std::vector<double> proj = l_dout.to_doubles();
  auto loss = [&] {
    Tensor lq = rows_of(c.q, c.order), lk = rows_of(c.k, c.order), lv = rows_of(c.v, c.order);
    Tensor out = Tensor::empty({lq.size(0), kHeadsQ, kHeadDimV}, DType::F64);
    Tensor lse = Tensor::empty({lq.size(0), kHeadsQ}, DType::F64);
    ring_attention_forward(lq, lk, lv, c.layout, kScale, cp, out, lse);
    return cp.all_reduce_scalar(test::project(out, proj));
  };
  Tensor lq = rows_of(c.q, c.order), lk = rows_of(c.k, c.order), lv = rows_of(c.v, c.order);
  Tensor out = Tensor::empty({lq.size(0), kHeadsQ, kHeadDimV}, DType::F64);
  Tensor lse = Tensor::empty({lq.size(0), kHeadsQ}, DType::F64);
  ring_attention_forward(lq, lk, lv, c.layout, kScale, cp, out, lse);
  Tensor dq = Tensor::empty(lq.shape(), DType::F64), dk = Tensor::empty(lk.shape(), DType::F64),
         dv = Tensor::empty(lv.shape(), DType::F64);
  ring_attention_backward(l_dout, lq, lk, lv, out, lse, c.layout, kScale, cp, dq, dk, dv);

  const int64_t T = c.q.size(0);
  struct Probe {
    Tensor* whole;
    const Tensor* grad;
  };
  double worst = 0;
  for (Probe p : {Probe{&c.q, &dq}, Probe{&c.k, &dk}, Probe{&c.v, &dv}}) {
    const int64_t row = p.whole->numel() / T;
    const std::vector<double> g = p.grad->to_doubles();
    for (int64_t token : {int64_t(1), T / 2, T - 1}) {
      const int64_t element = token * row + (token % row);
      double* x = p.whole->data<double>() + element;
      const double x0 = *x, h = 1e-6;
      *x = x0 + h;
      const double up = loss();
      *x = x0 - h;
      const double down = loss();
      *x = x0;
      // The rank holding the token reports its analytic gradient; the others 0.
      double analytic = 0;
      for (size_t i = 0; i < c.order.size(); ++i)
        if (c.order[i] == token) analytic = g[i * size_t(row) + size_t(token % row)];
      analytic = cp.all_reduce_scalar(analytic);
      const double numeric = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(numeric - analytic) / std::max(1.0, std::abs(numeric)));
    }
  }
  EXPECT_LT(worst, 1e-7);
}

}  // namespace
}  // namespace bb
