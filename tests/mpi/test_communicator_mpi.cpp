// MPI collectives on host tensors, run on 2, 4 and 8 ranks; exact expected values.
//
// Every rank computes what every other rank holds from a formula, so each
// expectation is a number known in advance. Assertions come after the
// collectives (EXPECT, not ASSERT) so that a failure on one rank never makes
// it skip a collective the others are waiting in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "bumblebee/distributed/world.h"
#include "tests/mpi/mpi_test_support.h"

using bb::DType;
using bb::Tensor;
using bb::dist::Communicator;
using bb::dist::ReduceOp;
using bb::dist::World;

using bb::test::error_message;
using bb::test::world_comm;

namespace {

// A value no two ranks share, exact in float32: multiples of 1/4 below 2^12.
double exact_value(int rank, int64_t i) { return rank * 100.0 + double(i) + 0.25; }

// A value that is not exact in any format, so summation order shows in the bits.
double inexact_value(int rank, int64_t i) { return std::sin(rank * 13.0 + double(i)) * 1000.0 / 7.0; }

Tensor filled(int64_t n, DType dt, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f(i);
  return Tensor::from_doubles(v, {n}, dt);
}

}  // namespace

class MpiCollectives : public ::testing::TestWithParam<DType> {};

TEST_P(MpiCollectives, AllReduceSumAndMaxAreExact) {
  Communicator& c = world_comm();
  const int n_ranks = c.size(), me = c.rank();
  const DType dt = GetParam();
  const bool floating = bb::is_floating(dt);
  auto value = [&](int rank, int64_t i) { return floating ? exact_value(rank, i) : rank * 100.0 + double(i); };
  // 7 elements split unevenly over the ranks; 3 leaves some ranks no slice at 4 and 8 ranks.
  for (int64_t n : {int64_t(7), int64_t(3), int64_t(1000)}) {
    Tensor sum = filled(n, dt, [&](int64_t i) { return value(me, i); });
    Tensor max = sum.clone();
    c.all_reduce(sum, ReduceOp::Sum);
    c.all_reduce(max, ReduceOp::Max);
    std::vector<double> got_sum = sum.to_doubles(), got_max = max.to_doubles();
    for (int64_t i = 0; i < n; ++i) {
      double expected = 0;
      for (int r = 0; r < n_ranks; ++r) expected += value(r, i);
      EXPECT_EQ(got_sum[size_t(i)], expected) << "n " << n << " element " << i;
      EXPECT_EQ(got_max[size_t(i)], value(n_ranks - 1, i)) << "n " << n << " element " << i;
    }
  }
}

TEST_P(MpiCollectives, AllGatherConcatenatesInRankOrder) {
  Communicator& c = world_comm();
  const int n_ranks = c.size(), me = c.rank();
  const DType dt = GetParam();
  Tensor in = filled(6, dt, [&](int64_t i) { return me * 10.0 + double(i); }).view({2, 3});
  Tensor out = Tensor::zeros({2 * n_ranks, 3}, dt);
  c.all_gather(in, out);
  // In-place form: this rank's rows of the output are the input.
  Tensor whole = Tensor::zeros({2 * n_ranks, 3}, dt);
  Tensor own = whole.narrow(2 * me, 2);
  own.copy_from(in);
  c.all_gather(own, whole);
  std::vector<double> got = out.to_doubles(), got_in_place = whole.to_doubles();
  for (int r = 0; r < n_ranks; ++r)
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(got[size_t(r * 6 + i)], r * 10.0 + i) << "rank " << r << " element " << i;
      EXPECT_EQ(got_in_place[size_t(r * 6 + i)], r * 10.0 + i) << "rank " << r << " element " << i;
    }
}

TEST_P(MpiCollectives, ReduceScatterSumsThisRanksRows) {
  Communicator& c = world_comm();
  const int n_ranks = c.size(), me = c.rank();
  const DType dt = GetParam();
  // Row k of rank s holds s * 1000 + 3k + column.
  Tensor in = filled(2 * n_ranks * 3, dt, [&](int64_t i) { return me * 1000.0 + double(i); }).view({2 * n_ranks, 3});
  Tensor out = Tensor::zeros({2, 3}, dt);
  c.reduce_scatter(in, out);
  Tensor in_place = in.clone();
  Tensor own = in_place.narrow(2 * me, 2);
  c.reduce_scatter(in_place, own);
  std::vector<double> got = out.to_doubles(), got_in_place = own.to_doubles();
  for (int64_t i = 0; i < 6; ++i) {
    double expected = 0;
    for (int s = 0; s < n_ranks; ++s) expected += s * 1000.0 + double(me * 6 + i);
    EXPECT_EQ(got[size_t(i)], expected) << "element " << i;
    EXPECT_EQ(got_in_place[size_t(i)], expected) << "element " << i;
  }
}

TEST_P(MpiCollectives, BroadcastFromTheLastRank) {
  Communicator& c = world_comm();
  const int root = c.size() - 1;
  Tensor t = filled(5, GetParam(), [&](int64_t i) { return c.rank() * 10.0 + double(i); });
  c.broadcast(t, root);
  std::vector<double> got = t.to_doubles();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[size_t(i)], root * 10.0 + i);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MpiCollectives, ::testing::Values(DType::F64, DType::F32, DType::I32, DType::I64),
                         [](const auto& info) { return std::string(bb::dtype_name(info.param)); });

// The sum is ((x_0 + x_1) + x_2) + ... on every rank, bit for bit, and
// reduce_scatter returns exactly all_reduce's rows.
TEST(MpiDeterminism, SumsInRankOrderBitForBitOnEveryRank) {
  Communicator& c = world_comm();
  const int n_ranks = c.size(), me = c.rank();
  for (DType dt : {DType::F64, DType::F32}) {
    const int64_t rows = 3 * n_ranks, cols = 5, n = rows * cols;
    Tensor data = filled(n, dt, [&](int64_t i) { return inexact_value(me, i); }).view({rows, cols});
    Tensor reduced = data.clone();
    c.all_reduce(reduced);
    Tensor mine = Tensor::zeros({3, cols}, dt);
    c.reduce_scatter(data, mine);
    Tensor everyone = Tensor::zeros({n_ranks * rows, cols}, dt);
    c.all_gather(reduced, everyone);

    // Expected: the rank-order sum in the tensor's own precision.
    Tensor expected = filled(n, dt, [&](int64_t i) { return inexact_value(0, i); });
    for (int r = 1; r < n_ranks; ++r) {
      Tensor next = filled(n, dt, [&](int64_t i) { return inexact_value(r, i); });
      if (dt == DType::F64)
        for (int64_t i = 0; i < n; ++i) expected.data<double>()[i] += next.data<double>()[i];
      else
        for (int64_t i = 0; i < n; ++i) expected.data<float>()[i] += next.data<float>()[i];
    }
    const size_t bytes = reduced.nbytes();
    EXPECT_EQ(std::memcmp(reduced.raw(), expected.raw(), bytes), 0) << bb::dtype_name(dt);
    EXPECT_EQ(std::memcmp(mine.raw(), static_cast<const char*>(reduced.raw()) + size_t(me) * mine.nbytes(),
                          mine.nbytes()),
              0)
        << bb::dtype_name(dt);
    for (int r = 0; r < n_ranks; ++r)
      EXPECT_EQ(std::memcmp(static_cast<const char*>(everyone.raw()) + size_t(r) * bytes, reduced.raw(), bytes), 0)
          << bb::dtype_name(dt) << ": rank " << r << " reduced to different bits";
  }
}

TEST(MpiCollectivesMisc, ScalarAgreementAndBarrier) {
  Communicator& c = world_comm();
  const int n_ranks = c.size();
  c.barrier();
  double sum = c.all_reduce_scalar(c.rank() + 0.5);
  double max = c.all_reduce_scalar(-double(c.rank()), ReduceOp::Max);
  EXPECT_EQ(sum, n_ranks * (n_ranks - 1) / 2.0 + 0.5 * n_ranks);
  EXPECT_EQ(max, 0.0);
}

TEST(MpiCollectivesMisc, Bfloat16MovesButDoesNotReduceOnTheHost) {
  Communicator& c = world_comm();
  Tensor t = filled(4, DType::BF16, [&](int64_t i) { return c.rank() + 0.5 * double(i); });
  c.broadcast(t, 0);
  Tensor gathered = Tensor::zeros({4 * c.size()}, DType::BF16);
  c.all_gather(t, gathered);
  std::string e = error_message([&] { c.all_reduce(t); });
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 0.5, 1, 1.5}));
  std::vector<double> g = gathered.to_doubles();
  for (int r = 0; r < c.size(); ++r) EXPECT_EQ(g[size_t(4 * r + 3)], 1.5);
  EXPECT_NE(e.find("host reduction of bfloat16 on group world is not supported"), std::string::npos) << e;
}

TEST(MpiCollectivesMisc, ShapeMismatchIsAnErrorOnEveryRank) {
  Communicator& c = world_comm();
  Tensor in = Tensor::zeros({2, 3}, DType::F32);
  Tensor out = Tensor::zeros({2 * c.size() + 1, 3}, DType::F32);
  std::string e = error_message([&] { c.all_gather(in, out); });
  EXPECT_NE(e.find("all_gather on group world of size " + std::to_string(c.size())), std::string::npos) << e;
}

// Ranks of one parity form a group, ordered by descending world rank.
TEST(MpiWorld, SplitByColorOrderedByKey) {
  World& w = World::instance();
  const int me = w.rank(), n_ranks = w.size();
  auto parity = w.split(me % 2, -me, "parity");
  const int group_size = n_ranks / 2;
  double sum = parity->all_reduce_scalar(double(me));
  Tensor members = Tensor::zeros({group_size}, DType::I32);
  parity->all_gather(Tensor::from_vector<int32_t>({me}, {1}), members);
  EXPECT_EQ(parity->name(), "parity");
  EXPECT_EQ(parity->size(), group_size);
  EXPECT_EQ(parity->rank(), group_size - 1 - me / 2);
  double expected = 0;
  for (int r = me % 2; r < n_ranks; r += 2) expected += r;
  EXPECT_EQ(sum, expected);
  std::vector<double> got = members.to_doubles();
  for (int k = 0; k < group_size; ++k) EXPECT_EQ(got[size_t(k)], n_ranks - 2 + me % 2 - 2 * k);
  EXPECT_TRUE(w.uses_mpi());
  EXPECT_GE(w.local_rank(), 0);
  EXPECT_LT(w.local_rank(), n_ranks);
}
