// all_to_all with per-rank counts on host tensors, run on 2, 4 and 8 ranks:
// uneven and zero counts, rows of a trailing shape, the counts exchange, and
// the count errors. Row k of the block rank i sends rank j holds
// i * 1000 + j * 100 + k * 10 + column, so every received row is known.
#include <gtest/gtest.h>

#include <functional>

#include "bumblebee/distributed/world.h"
#include "tests/mpi/mpi_test_support.h"

using bb::DType;
using bb::Tensor;
using bb::dist::Communicator;
using bb::dist::World;

using bb::test::error_message;
using bb::test::world_comm;

namespace {

constexpr int64_t kCols = 3;

// Rows rank i sends rank j: 0, 1 or 2, so some blocks are empty.
int64_t rows_between(int i, int j) { return (i + 2 * j) % 3; }

double row_value(int from, int to, int64_t k, int64_t col) { return from * 1000.0 + to * 100.0 + k * 10.0 + col; }

// Rows [block from `from` to to_0][block to to_1]... for the given counts.
Tensor blocks(int me, const std::vector<int64_t>& counts, bool sending, DType dt) {
  std::vector<double> v;
  for (int j = 0; j < int(counts.size()); ++j)
    for (int64_t k = 0; k < counts[size_t(j)]; ++k)
      for (int64_t col = 0; col < kCols; ++col)
        v.push_back(sending ? row_value(me, j, k, col) : row_value(j, me, k, col));
  const int64_t rows = int64_t(v.size()) / kCols;
  return Tensor::from_doubles(v, {rows, 1, kCols}, dt);
}

}  // namespace

class MpiAllToAll : public ::testing::TestWithParam<DType> {};

TEST_P(MpiAllToAll, UnevenAndZeroCountsDeliverTheExactRows) {
  Communicator& c = world_comm();
  const int n = c.size(), me = c.rank();
  const DType dt = GetParam();
  std::vector<int64_t> send_counts, expected_counts;
  for (int j = 0; j < n; ++j) {
    send_counts.push_back(rows_between(me, j));
    expected_counts.push_back(rows_between(j, me));
  }
  const std::vector<int64_t> recv_counts = c.all_to_all_counts(send_counts);
  const Tensor in = blocks(me, send_counts, /*sending=*/true, dt);
  int64_t out_rows = 0;
  for (int64_t r : recv_counts) out_rows += r;
  Tensor out = Tensor::zeros({out_rows, 1, kCols}, dt);
  c.all_to_all(in, send_counts, out, recv_counts);
  EXPECT_EQ(recv_counts, expected_counts);
  EXPECT_EQ(out.to_doubles(), blocks(me, expected_counts, /*sending=*/false, dt).to_doubles());
}

// A rank with nothing to send or receive still takes part.
TEST_P(MpiAllToAll, EmptyTensorsOnSomeRanks) {
  Communicator& c = world_comm();
  const int n = c.size(), me = c.rank();
  const DType dt = GetParam();
  // Rank 0 sends one row to every odd rank; everyone else sends nothing.
  std::vector<int64_t> send_counts(size_t(n), 0), recv_counts(size_t(n), 0);
  if (me == 0)
    for (int j = 1; j < n; j += 2) send_counts[size_t(j)] = 1;
  if (me % 2 == 1) recv_counts[0] = 1;
  const Tensor in = blocks(me, send_counts, true, dt);
  Tensor out = Tensor::zeros({me % 2, 1, kCols}, dt);
  const std::vector<int64_t> exchanged = c.all_to_all_counts(send_counts);
  c.all_to_all(in, send_counts, out, recv_counts);
  EXPECT_EQ(exchanged, recv_counts);
  EXPECT_EQ(out.to_doubles(), blocks(me, recv_counts, false, dt).to_doubles());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MpiAllToAll, ::testing::Values(DType::F32, DType::F64, DType::I64),
                         [](const auto& info) { return std::string(bb::dtype_name(info.param)); });

// Every rank makes the same mistake, so every rank throws before any message.
TEST(MpiAllToAllErrors, CountsThatDoNotFitTheTensorsNameTheNumbers) {
  Communicator& c = world_comm();
  const int n = c.size(), me = c.rank();
  const std::string size = std::to_string(n), rank = std::to_string(me);
  Tensor in = Tensor::zeros({int64_t(n), 2}, DType::F32), out = Tensor::zeros({int64_t(n), 2}, DType::F32);
  std::vector<int64_t> ones(size_t(n), 1);

  std::vector<int64_t> short_counts(size_t(n - 1), 1);
  std::string e = error_message([&] { c.all_to_all(in, short_counts, out, ones); });
  EXPECT_NE(e.find("all_to_all on group world of size " + size + ": " + std::to_string(n - 1) +
                   " send_counts, expected " + size),
            std::string::npos)
      << e;
  std::vector<int64_t> too_many = ones;
  too_many[0] = 2;
  e = error_message([&] { c.all_to_all(in, ones, out, too_many); });
  EXPECT_NE(e.find("recv_counts sum to " + std::to_string(n + 1) + " rows but out has " + size + " rows"),
            std::string::npos)
      << e;
  std::vector<int64_t> negative = ones;
  negative[size_t(n - 1)] = -1;
  e = error_message([&] { c.all_to_all(in, negative, out, ones); });
  EXPECT_NE(e.find("send_counts[" + std::to_string(n - 1) + "] is -1"), std::string::npos) << e;
  std::vector<int64_t> self_mismatch = ones;
  self_mismatch[size_t(me)] = 0;
  self_mismatch[size_t((me + 1) % n)] = 2;
  e = error_message([&] { c.all_to_all(in, self_mismatch, out, ones); });
  EXPECT_NE(e.find("rank " + rank + " sends itself 0 rows (send_counts[" + rank + "]) but receives 1"),
            std::string::npos)
      << e;
  Tensor f64 = Tensor::zeros({int64_t(n), 2}, DType::F64);
  e = error_message([&] { c.all_to_all(in, ones, f64, ones); });
  EXPECT_NE(e.find("all_to_all on group world: in is float32 but out is float64"), std::string::npos) << e;
  Tensor wide = Tensor::zeros({int64_t(n), 3}, DType::F32);
  e = error_message([&] { c.all_to_all(in, ones, wide, ones); });
  EXPECT_NE(e.find("has rows of shape [2] but out [" + size + ", 3] has rows of shape [3]"), std::string::npos) << e;
  e = error_message([&] { c.all_to_all_counts(short_counts); });
  EXPECT_NE(e.find("all_to_all_counts on group world of size " + size), std::string::npos) << e;
  c.barrier();
}
