// Tests of HF checkpoint folders: single-file and sharded round trips, the
// index format transformers reads, and the errors for inconsistent folders.
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/hf_checkpoint_names.h"
#include "tests/primitive/ckpt/ckpt_test_util.h"

namespace bb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;
using testing::read_text;
using testing::write_text;

class HFCheckpointTest : public testing::TempDirTest {};

// Five tensors of 24, 40, 16, 8 and 48 bytes; values differ per tensor.
std::vector<std::pair<std::string, Tensor>> small_model() {
  return {
      {"model.embed_tokens.weight", Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {3, 2}, DType::F32)},
      {"model.layers.0.self_attn.q_proj.weight", Tensor::from_doubles({-1, -2, -3, -4, -5}, {5}, DType::F64)},
      {"model.layers.0.input_layernorm.weight",
       Tensor::from_doubles({0.5, 0.25, 1, 2, 4, 8, 16, 32}, {8}, DType::BF16)},
      {"model.norm.weight", Tensor::from_doubles({7, 8}, {2}, DType::F32)},
      {"lm_head.weight", Tensor::from_doubles({9, 10, 11, 12, 13, 14}, {2, 3}, DType::F64)},
  };
}

void expect_same(const HFCheckpoint& ck, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    names.push_back(name);
    ASSERT_TRUE(ck.has(name));
    EXPECT_EQ(ck.shape(name), t.shape());
    EXPECT_EQ(ck.dtype(name), t.dtype());
    EXPECT_EQ(ck.get(name).to_doubles(), t.to_doubles());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(ck.names(), names);
}

TEST(HFCheckpointNames, ShardNamesAreExactlyTheWritersPattern) {
  using hf_files::is_shard_name;
  EXPECT_TRUE(is_shard_name(hf_files::shard_name(0, 3)));
  EXPECT_TRUE(is_shard_name("model-00012-of-00340.safetensors"));
  for (const char* other : {"model-1-of-3.safetensors", "model-00001-of-00003.safetensors.tmp",
                            "model-0000a-of-00003.safetensors", "model-00001-of-000030.safetensors",
                            "xmodel-00001-of-00003.safetensors", "model-00001_of-00003.safetensors",
                            "model.safetensors", ""})
    EXPECT_FALSE(is_shard_name(other)) << other;
}

TEST_F(HFCheckpointTest, SingleFileRoundTrip) {
  const auto tensors = small_model();
  save_hf_checkpoint(dir_.string(), tensors);
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  HFCheckpoint ck = HFCheckpoint::open(dir_.string());
  expect_same(ck, tensors);
  EXPECT_EQ(SafetensorsFile::open(path("model.safetensors")).metadata().at("format"), "pt");
  expect_error([&] { ck.get("nope"); }, {dir_.string(), "'nope'"});
}

TEST_F(HFCheckpointTest, ShardedRoundTrip) {
  const auto tensors = small_model();
  // 24 | 40 | 16+8 | 48 with a 40-byte limit: greedy in the given order, the
  // 48-byte tensor larger than the limit gets its own shard.
  save_hf_checkpoint(dir_.string(), tensors, 40);
  for (int i = 1; i <= 4; ++i)
    EXPECT_TRUE(fs::exists(dir_ / ("model-0000" + std::to_string(i) + "-of-00004.safetensors")));
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  const json index = json::parse(read_text(path("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 24 + 40 + 16 + 8 + 48);
  EXPECT_EQ(index["weight_map"].size(), 5u);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.self_attn.q_proj.weight"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.input_layernorm.weight"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00004-of-00004.safetensors");

  HFCheckpoint ck = HFCheckpoint::open(dir_.string());
  expect_same(ck, tensors);
  EXPECT_EQ(fs::path(ck.shard_path("model.norm.weight")).filename(), "model-00003-of-00004.safetensors");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(HFCheckpointTest, ResavingRemovesTheOldLayout) {
  const auto tensors = small_model();
  save_hf_checkpoint(dir_.string(), tensors, 40);
  save_hf_checkpoint(dir_.string(), {tensors[0], tensors[3]}, 30);  // 2 shards replace 4
  EXPECT_FALSE(fs::exists(dir_ / "model-00003-of-00004.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "model-00002-of-00002.safetensors"));
  expect_same(HFCheckpoint::open(dir_.string()), {tensors[0], tensors[3]});

  save_hf_checkpoint(dir_.string(), {tensors[1]});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 1);
  expect_same(HFCheckpoint::open(dir_.string()), {tensors[1]});

  save_hf_checkpoint(dir_.string(), tensors, 40);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  expect_same(HFCheckpoint::open(dir_.string()), tensors);
}

TEST_F(HFCheckpointTest, SaveRejectsDuplicateNames) {
  const Tensor t = Tensor::from_doubles({1}, {1}, DType::F32);
  expect_error([&] { save_hf_checkpoint(dir_.string(), {{"a", t}, {"b", t}, {"a", t}}, 4); }, {"'a'", "twice"});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 0);
}

TEST_F(HFCheckpointTest, MissingFiles) {
  expect_error([&] { HFCheckpoint::open(path("nonexistent")); }, {"nonexistent", "not a directory"});
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {dir_.string(), "model.safetensors.index.json"});
}

TEST_F(HFCheckpointTest, IndexPointingToMissingShard) {
  save_hf_checkpoint(dir_.string(), small_model(), 40);
  fs::remove(dir_ / "model-00002-of-00004.safetensors");
  expect_error([&] { HFCheckpoint::open(dir_.string()); },
               {"model.safetensors.index.json", "model-00002-of-00004.safetensors", "does not exist",
                "model.layers.0.self_attn.q_proj.weight"});
}

TEST_F(HFCheckpointTest, IndexNamingATensorAbsentFromItsShard) {
  save_hf_checkpoint(dir_.string(), small_model(), 40);
  json index = json::parse(read_text(path("model.safetensors.index.json")));
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00004.safetensors";
  write_text(path("model.safetensors.index.json"), index.dump());
  expect_error([&] { HFCheckpoint::open(dir_.string()); },
               {"model.safetensors.index.json", "'model.norm.weight'", "model-00001-of-00004.safetensors",
                "does not contain"});
}

TEST_F(HFCheckpointTest, DuplicateTensorAcrossShards) {
  const Tensor t = Tensor::from_doubles({1, 2}, {2}, DType::F32);
  write_safetensors(path("s1.safetensors"), {{"w", t}, {"x", t}});
  write_safetensors(path("s2.safetensors"), {{"w", t}});
  write_text(path("model.safetensors.index.json"),
             R"({"metadata":{"total_size":24},"weight_map":{"w":"s1.safetensors","x":"s2.safetensors"}})");
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {"'w'", "s1.safetensors", "s2.safetensors"});
}

TEST_F(HFCheckpointTest, ShardsFromAnotherSaveAreDetected) {
  const auto tensors = small_model();
  save_hf_checkpoint(dir_.string(), tensors, 40);
  const std::string old_shard = read_text(path("model-00001-of-00004.safetensors"));
  save_hf_checkpoint(dir_.string(), tensors, 40);
  write_text(path("model-00001-of-00004.safetensors"), old_shard);  // as if a later save stopped half-way
  expect_error([&] { HFCheckpoint::open(dir_.string()); },
               {"model-00001-of-00004.safetensors", "not written by the same save"});
}

TEST_F(HFCheckpointTest, HostileOrMalformedIndex) {
  write_text(path("model.safetensors.index.json"), R"({"weight_map":{"w":"../outside.safetensors"}})");
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {"'w'", "../outside.safetensors", "plain file name"});
  write_text(path("model.safetensors.index.json"), R"({"weight_map":{"w":3}})");
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {"model.safetensors.index.json", "'w'"});
  write_text(path("model.safetensors.index.json"), R"({"weight_map":)");
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {"model.safetensors.index.json", "not valid JSON"});
  write_text(path("model.safetensors.index.json"), R"({"metadata":{}})");
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {"model.safetensors.index.json", "weight_map"});
}

TEST_F(HFCheckpointTest, CorruptShardNamesTheShard) {
  save_hf_checkpoint(dir_.string(), small_model(), 40);
  const fs::path shard = dir_ / "model-00004-of-00004.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 3);
  expect_error([&] { HFCheckpoint::open(dir_.string()); }, {"model-00004-of-00004.safetensors", "lm_head.weight"});
}

}  // namespace
}  // namespace bb
