// init_normal_shard gives every tensor-parallel shard the values of the full
// tensor drawn by Generator::fill_normal and sliced, in any parameter dtype,
// with zero vocabulary padding, whatever the number of threads.
#include <gtest/gtest.h>

#include "bumblebee/core/rng.h"
#include "bumblebee/primitive/modules/parameter_init.h"

namespace bb {
namespace {

constexpr uint64_t kSeed = 1234;
constexpr double kStd = 0.02;

// The full tensor, drawn whole.
std::vector<double> full_draw(const Shape& shape) {
  Tensor full = Tensor::empty(shape, DType::F64);
  Generator(kSeed).fill_normal(full, kStd);
  return full.to_doubles();
}

struct ShardCase {
  ShardKind kind;
  Shape full;
  int tp;
};

// "Row_3_8_tp4": readable test names, and what gtest prints for the parameter.
std::string case_name(const ShardCase& c) {
  const char* kinds[] = {"Replicated", "Column", "Row", "Vocab"};
  std::string name = kinds[int(c.kind)];
  for (int64_t d : c.full) name += "_" + std::to_string(d);
  return name + "_tp" + std::to_string(c.tp);
}
std::string test_name(const ::testing::TestParamInfo<ShardCase>& info) { return case_name(info.param); }
void PrintTo(const ShardCase& c, std::ostream* os) { *os << case_name(c); }

class InitNormalShard : public ::testing::TestWithParam<ShardCase> {};

TEST_P(InitNormalShard, EqualsTheSlicedFullDraw) {
  const ShardCase c = GetParam();
  const std::vector<double> full = full_draw(c.full);
  const int64_t rows = c.full[0], cols = c.full.size() > 1 ? c.full[1] : 1;
  for (DType dtype : {DType::F64, DType::F32}) {
    for (int rank = 0; rank < c.tp; ++rank) {
      ParamStore store;
      Parameter& p = store.add("w", c.full, {c.kind, rank, c.tp});
      store.allocate(dtype, dtype, Device::cpu());
      init_normal_shard(p, kSeed, kStd);
      const std::vector<double> got = p.value.to_doubles();
      const int64_t local_rows = p.local_shape[0], local_cols = int64_t(got.size()) / local_rows;
      for (int64_t r = 0; r < local_rows; ++r) {
        for (int64_t c2 = 0; c2 < local_cols; ++c2) {
          double want = 0;   // vocabulary padding
          if (c.kind == ShardKind::Row) {
            want = full[size_t(r * cols + p.shard_begin + c2)];
          } else if (c.kind == ShardKind::Replicated) {
            want = full[size_t(r * local_cols + c2)];
          } else if (r < p.shard_valid) {
            want = full[size_t((p.shard_begin + r) * local_cols + c2)];
          }
          if (dtype == DType::F32) want = double(float(want));
          ASSERT_EQ(got[size_t(r * local_cols + c2)], want)
              << "rank " << rank << " of " << c.tp << ", element (" << r << ", " << c2 << "), " << dtype_name(dtype);
        }
      }
      EXPECT_LE(p.local_shape[0], rows + c.tp);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shards, InitNormalShard,
    ::testing::Values(ShardCase{ShardKind::Replicated, {37}, 1}, ShardCase{ShardKind::Replicated, {6, 5}, 2},
                      ShardCase{ShardKind::Column, {8, 5}, 2}, ShardCase{ShardKind::Row, {3, 8}, 4},
                      ShardCase{ShardKind::Vocab, {11, 4}, 4},
                      // Big enough to be drawn by several threads.
                      ShardCase{ShardKind::Row, {1024, 2048}, 2}, ShardCase{ShardKind::Vocab, {4097, 512}, 2}),
    test_name);

// Many parameters at once (init_normal_shards: small ones side by side on the
// host's threads, a big one on its own) give each the values it gets alone.
TEST(InitNormalShards, EqualsEachParameterDrawnAlone) {
  ParamStore batch, alone;
  const std::vector<Shape> shapes = {{7, 3}, {2048, 1024}, {5}, {64, 32}, {64, 32}, {300, 17}};
  for (ParamStore* s : {&batch, &alone}) {
    for (size_t i = 0; i < shapes.size(); ++i) s->add("p" + std::to_string(i), shapes[i], {});
    s->allocate(DType::F32, DType::F32, Device::cpu());
  }
  std::vector<NormalInit> inits;
  for (size_t i = 0; i < shapes.size(); ++i) {
    inits.push_back({&batch.params()[i], kSeed + i});
    init_normal_shard(alone.params()[i], kSeed + i, kStd);
  }
  init_normal_shards(inits, kStd);
  for (size_t i = 0; i < shapes.size(); ++i)
    EXPECT_EQ(batch.params()[i].value.to_doubles(), alone.params()[i].value.to_doubles()) << "parameter " << i;
}

}  // namespace
}  // namespace bb
