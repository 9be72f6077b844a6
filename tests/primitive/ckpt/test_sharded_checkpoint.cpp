// Tests of sharded checkpoints on one rank: pieces written and read back as
// any box (spanning several pieces, cast on the way), a corrupted or
// truncated shard file named by its checksum or size, and metadata that is
// hostile or incomplete (overlapping, outside, missing pieces, files outside
// the folder, a tensor it does not cover) rejected naming the tensor. The
// multi-rank save (ownership, per-rank files) is tests/mpi/test_sharded_checkpoint_mpi.cpp.
#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/primitive/ckpt/ckpt_test_util.h"

namespace bb {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::expect_error;

class ShardedCheckpointTest : public testing::TempDirTest {
 protected:
  // A [6, 4] float64 tensor with value 10 * row + col, saved as the three
  // boxes of its flat range [0, 24) cut at 6 and 14 (as dp slices would be),
  // and a [5] float32 one whole.
  void save() {
    comm_ = dist::make_single_rank_communicator("test");
    std::vector<double> v(24);
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(10 * (i / 4) + i % 4);
    const Tensor a = Tensor::from_vector(v, {24});
    std::vector<TensorPiece> pieces;
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 6}, {6, 14}, {14, 24}}) {
      int64_t at = begin;
      for (const TensorBox& b : flat_range_boxes({6, 4}, begin, end)) {
        pieces.push_back({"exp_avg/a", {6, 4}, b, a.narrow(at, b.numel())});
        at += b.numel();
      }
    }
    pieces.push_back({"model/b", {5}, {{0}, {5}}, Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, {5})});
    save_sharded_tensors(dir_.string(), pieces, *comm_);
  }
  json metadata() const { return json::parse(std::ifstream(path(kShardedMetadataFile))); }
  void write_metadata(const json& m) const { std::ofstream(path(kShardedMetadataFile)) << m.dump(); }

  std::shared_ptr<dist::Communicator> comm_;
};

TEST_F(ShardedCheckpointTest, ReadsAnyBoxFromThePiecesThatCoverIt) {
  save();
  EXPECT_TRUE(fs::exists(path("rank-00000.safetensors")));
  EXPECT_FALSE(fs::exists(path("plan-00000.json"))) << "the plans are removed once merged";
  ShardedCheckpoint ck = ShardedCheckpoint::open(dir_.string());
  EXPECT_EQ(ck.keys(), (std::vector<std::string>{"exp_avg/a", "model/b"}));
  EXPECT_EQ(ck.shape("exp_avg/a"), (Shape{6, 4}));
  EXPECT_EQ(ck.dtype("exp_avg/a"), DType::F64);
  // Columns 1..3 of every row: a row-parallel shard at another layout, across all pieces.
  Tensor cols = Tensor::empty({6, 2}, DType::F32);
  ck.read("exp_avg/a", {{0, 1}, {6, 2}}, cols);
  const std::vector<double> got = cols.to_doubles();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(got[size_t(r * 2 + c)], double(10 * r + c + 1)) << r << "," << c;
  Tensor b = Tensor::empty({2}, DType::F64);
  ck.read("model/b", {{3}, {2}}, b);
  EXPECT_EQ(b.to_doubles(), (std::vector<double>{4, 5}));
}

TEST_F(ShardedCheckpointTest, ACorruptedOrTruncatedShardFileIsNamed) {
  save();
  const std::string file = path("rank-00000.safetensors");
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  ShardedCheckpoint ck = ShardedCheckpoint::open(dir_.string());
  Tensor out = Tensor::empty({5}, DType::F32);
  expect_error([&] { ck.read("model/b", {{0}, {5}}, out); }, {file, "corrupt", "CRC-32C"});
  fs::resize_file(file, 100);
  ShardedCheckpoint again = ShardedCheckpoint::open(dir_.string());
  expect_error([&] { again.read("model/b", {{0}, {5}}, out); }, {file, "100 bytes", "records"});
}

TEST_F(ShardedCheckpointTest, AMetadataFileMissingATensorNamesIt) {
  save();
  json m = metadata();
  m["tensors"].erase("model/b");
  write_metadata(m);
  ShardedCheckpoint ck = ShardedCheckpoint::open(dir_.string());
  EXPECT_FALSE(ck.has("model/b"));
  Tensor out = Tensor::empty({5}, DType::F32);
  expect_error([&] { ck.read("model/b", {{0}, {5}}, out); }, {kShardedMetadataFile, "no tensor 'model/b'"});
}

TEST_F(ShardedCheckpointTest, HostileMetadataIsRejectedNamingTheTensorOrFile) {
  save();
  const json good = metadata();
  struct Row {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> parts;
  };
  const std::vector<Row> rows = {
      {"a piece dropped", [](json& m) { m["tensors"]["exp_avg/a"]["shards"].erase(0); },
       {"'exp_avg/a'", "cover", "a piece is missing"}},
      {"overlapping pieces",
       [](json& m) { m["tensors"]["exp_avg/a"]["shards"][1]["offsets"] = m["tensors"]["exp_avg/a"]["shards"][0]["offsets"]; },
       {"'exp_avg/a'", "overlap"}},
      {"a piece outside the shape", [](json& m) { m["tensors"]["model/b"]["shards"][0]["offsets"] = {3}; },
       {"'model/b'", "outside its shape"}},
      {"a negative dimension", [](json& m) { m["tensors"]["model/b"]["shape"] = {-5}; }, {"'model/b'", "shape"}},
      {"an unlisted file", [](json& m) { m["tensors"]["model/b"]["shards"][0]["file"] = "rank-00009.safetensors"; },
       {"'model/b'", "rank-00009.safetensors", "does not list"}},
      {"a file outside the folder", [](json& m) { m["files"]["../x.safetensors"] = {{"bytes", 1}, {"crc32c", 0}}; },
       {"'../x.safetensors'", "not a plain file name"}},
      {"another format", [](json& m) { m["format"] = "something-else"; }, {"not a sharded checkpoint metadata"}},
      {"a field of the wrong type", [](json& m) { m["files"]["rank-00000.safetensors"]["bytes"] = "many"; },
       {"file 'rank-00000.safetensors' bytes must be an integer", "\"many\""}},
      {"a float where an integer goes", [](json& m) { m["files"]["rank-00000.safetensors"]["crc32c"] = 4.6e21; },
       {"crc32c must be an integer in [0, 4294967295]"}},
      {"a missing field", [](json& m) { m["files"]["rank-00000.safetensors"].erase("crc32c"); },
       {"not valid sharded checkpoint metadata"}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    json m = good;
    r.edit(m);
    write_metadata(m);
    std::vector<std::string> parts = r.parts;
    parts.push_back(kShardedMetadataFile);
    expect_error([&] { ShardedCheckpoint::open(dir_.string()); }, parts);
  }
  std::ofstream(path(kShardedMetadataFile)) << "{not json";
  expect_error([&] { ShardedCheckpoint::open(dir_.string()); }, {kShardedMetadataFile, "not valid JSON"});
  fs::remove(path(kShardedMetadataFile));
  expect_error([&] { ShardedCheckpoint::open(dir_.string()); }, {kShardedMetadataFile, "missing"});
}

}  // namespace
}  // namespace bb
