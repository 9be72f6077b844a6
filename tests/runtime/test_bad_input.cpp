// Bad input to the runtime gets one clear error naming the cause.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

// A writable copy of a fixture whose config or weights a test can break.
class BrokenFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bb_bad_input_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(test::fixture_dir("qwen3_gqa"), dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json config() { return test::read_json((dir_ / "config.json").string()); }
  void write_config(const nlohmann::json& j) { std::ofstream(dir_ / "config.json") << j.dump(); }
  void rewrite_weights(const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
    HFCheckpoint ck = HFCheckpoint::open(dir_.string());
    std::vector<std::pair<std::string, Tensor>> t;
    for (const std::string& n : ck.names()) t.emplace_back(n, ck.get(n).clone());
    edit(t);
    save_hf_checkpoint(dir_.string(), t);
  }
  std::string build_error(const BBConfig& b = {}) {
    RuntimeConfig cfg;
    cfg.hf_path = dir_.string();
    cfg.backend_cfg = b;
    try {
      create_runtime(cfg)->build_model();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(BrokenFixture, UnsupportedModelType) {
  nlohmann::json j = config();
  j["model_type"] = "gpt2";
  write_config(j);
  EXPECT_NE(build_error().find("unsupported model_type 'gpt2'"), std::string::npos) << build_error();
}

TEST_F(BrokenFixture, UnknownOverrideKeySuggestsNearest) {
  BBConfig b;
  b.model_overrides = {{"num_layer", 1}};
  const std::string e = build_error(b);
  EXPECT_NE(e.find("unknown model config key 'num_layer'; did you mean 'num_layers'"), std::string::npos) << e;
}

TEST_F(BrokenFixture, MissingTensor) {
  rewrite_weights([](auto& t) { t.erase(t.begin()); });
  EXPECT_NE(build_error().find("lacks tensor"), std::string::npos) << build_error();
}

TEST_F(BrokenFixture, ExtraTensor) {
  rewrite_weights([](auto& t) { t.emplace_back("model.layers.9.extra.weight", Tensor::zeros({2}, DType::F32)); });
  EXPECT_NE(build_error().find("'model.layers.9.extra.weight' that the model does not have"), std::string::npos)
      << build_error();
}

TEST_F(BrokenFixture, ShapeMismatch) {
  rewrite_weights([](auto& t) {
    for (auto& [n, v] : t)
      if (n == "model.norm.weight") v = Tensor::zeros({v.numel() + 1}, v.dtype());
  });
  EXPECT_NE(build_error().find("'model.norm.weight' has shape [49], the model expects [48]"), std::string::npos)
      << build_error();
}

TEST_F(BrokenFixture, MissingConfigField) {
  nlohmann::json j = config();
  j.erase("hidden_size");
  write_config(j);
  EXPECT_NE(build_error().find("'hidden_size'"), std::string::npos) << build_error();
}

TEST_F(BrokenFixture, HeadsNotDivisibleByTpOnOneRankStillReported) {
  nlohmann::json j = config();
  j["num_attention_heads"] = 5;
  write_config(j);
  EXPECT_NE(build_error().find("num_attention_heads 5 is not divisible by num_key_value_heads 2"), std::string::npos)
      << build_error();
}

TEST(BadBatch, TokenIdOutsideVocabulary) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("qwen3_gqa");
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  PackedBatch b;
  b.input_ids = {1, 2, 131};
  b.seq_lens = {3};
  try {
    rt->forward_backward(h, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 131 at position 2 is outside the vocabulary [0, 131)"),
              std::string::npos)
        << e.what();
  }
}

TEST(BadBatch, SeqLensDisagreeWithTokens) {
  PackedBatch b;
  b.input_ids = {1, 2, 3};
  b.seq_lens = {2};
  EXPECT_THROW(b.validate(), Error);
}

TEST_F(BrokenFixture, SlidingWindowIsNotImplementedYet) {
  nlohmann::json j = config();
  j["use_sliding_window"] = true;
  write_config(j);
  EXPECT_NE(build_error().find("sliding-window attention is not implemented"), std::string::npos) << build_error();
}

// Features of later work are rejected up front with a message naming them, never silently ignored.
TEST_F(BrokenFixture, LaterFeaturesAreClearErrors) {
  const std::vector<std::pair<std::function<void(BBConfig&)>, std::string>> cases = {
      {[](BBConfig& b) { b.parallel.pp = 2; }, "pipeline parallelism (pp/vpp/pp_layout) is not implemented yet"},
      {[](BBConfig& b) { b.parallel.vpp = 2; }, "pipeline parallelism (pp/vpp/pp_layout) is not implemented yet"},
      {[](BBConfig& b) { b.parallel.cp = 2; }, "context parallelism (cp) is not implemented yet"},
      {[](BBConfig& b) { b.parallel.ep = 2; }, "expert parallelism (ep/etp) needs an MoE model"},
      {[](BBConfig& b) { b.optimizer.offload_fraction = 0.5; }, "optimizer.offload_fraction is not implemented yet"},
  };
  for (const auto& [edit, message] : cases) {
    BBConfig b;
    edit(b);
    const std::string e = build_error(b);
    EXPECT_NE(e.find(message), std::string::npos) << "expected '" << message << "', got '" << e << "'";
  }
}

TEST(BadConfig, UnknownBackendAndUnimplementedParallelism) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("qwen3_gqa");
  cfg.backend = "megatron";
  EXPECT_THROW(create_runtime(cfg), Error);
  cfg.backend = "bb";
  cfg.backend_cfg.parallel.pp = 2;
  EXPECT_THROW(create_runtime(cfg), Error);
}

}  // namespace
}  // namespace bb
