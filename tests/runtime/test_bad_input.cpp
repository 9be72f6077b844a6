// Bad input to the runtime gets one clear error naming the cause.
#include <gtest/gtest.h>

#include <cmath>
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

// Bad config.json values fail through the runtime naming the file, the key and
// the value as written. With random init (no weights read) the sizes that used
// to wrap the element count and loop for ever fail before anything is built.
TEST_F(BrokenFixture, BadConfigValuesNameFileKeyAndValue) {
  struct Row {
    std::string pointer;
    nlohmann::json value;
    std::string words;
  };
  const std::vector<Row> rows = {
      {"/vocab_size", int64_t(1) << 62, "'vocab_size' = 4611686018427387904"},
      {"/hidden_size", int64_t(1) << 40, "'hidden_size' = 1099511627776"},
      {"/num_hidden_layers", int64_t(1) << 31, "'num_hidden_layers' = 2147483648"},
      {"/vocab_size", UINT64_MAX, "'vocab_size' = 18446744073709551615"},
      {"/rope_parameters/rope_theta", 0, "'rope_parameters.rope_theta' = 0"},
      {"/rope_parameters/rope_type", "llama3", "llama3 rope scaling lacks 'factor'"},
      {"/rms_norm_eps", "1e-6", "'rms_norm_eps' = \"1e-6\""},
      {"/tie_word_embeddings", "true", "'tie_word_embeddings' = \"true\""},
      {"/model_type", 7, "'model_type' = 7"},
  };
  const nlohmann::json original = config();
  BBConfig b;
  b.load_hf_weights = false;
  for (const Row& r : rows) {
    nlohmann::json j = original;
    j[nlohmann::json::json_pointer(r.pointer)] = r.value;
    write_config(j);
    const std::string e = build_error(b);
    EXPECT_NE(e.find((dir_ / "config.json").string() + ": "), std::string::npos) << r.pointer << ": " << e;
    EXPECT_NE(e.find(r.words), std::string::npos) << r.pointer << ": expected '" << r.words << "' in '" << e << "'";
  }
}

// A loaded weight must be floating point and finite; the error names the tensor.
TEST_F(BrokenFixture, BadWeightsNameTheTensor) {
  const std::string norm = "model.norm.weight", down = "model.layers.1.mlp.down_proj.weight";
  const std::vector<std::pair<std::function<void(Tensor&)>, std::string>> rows = {
      {[](Tensor& t) { t = Tensor::zeros(t.shape(), DType::I32); },
       "checkpoint tensor 'model.norm.weight' is stored as int32"},
      {[](Tensor& t) { t = Tensor::zeros(t.shape(), DType::U8); },
       "checkpoint tensor 'model.norm.weight' is stored as uint8"},
      {[](Tensor& t) { static_cast<float*>(t.raw())[5] = std::nanf(""); },
       "checkpoint tensor 'model.layers.1.mlp.down_proj.weight' holds a non-finite value (nan) at element 5"},
      {[](Tensor& t) {
         Tensor h = Tensor::empty(t.shape(), DType::F16);
         h.copy_from(t);
         static_cast<uint16_t*>(h.raw())[3] = 0x7c00;   // +Inf
         t = h;
       },
       "checkpoint tensor 'model.layers.1.mlp.down_proj.weight' holds a non-finite value (inf) at element 3"},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    fs::remove_all(dir_);
    fs::copy(test::fixture_dir("qwen3_gqa"), dir_);
    const std::string& target = i < 2 ? norm : down;
    rewrite_weights([&](auto& t) {
      for (auto& [n, v] : t)
        if (n == target) rows[i].first(v);
    });
    const std::string e = build_error();
    EXPECT_NE(e.find(rows[i].second), std::string::npos) << "expected '" << rows[i].second << "' in '" << e << "'";
  }
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
      // Pipeline parallelism exists; what one rank cannot hold is an error naming the numbers.
      {[](BBConfig& b) { b.parallel.vpp = 2; }, "vpp = 2 > 1 needs pp > 1"},
      {[](BBConfig& b) { b.parallel.pp_layout = "E,t|t,L"; }, "pp_layout 'E,t|t,L' has 2 stages, but pp * vpp = 1"},
      // One rank cannot hold cp = 2 (cp runs: tests/tools/test_context_parallel_parity.cpp).
      {[](BBConfig& b) { b.parallel.cp = 2; }, "world size 1 is not divisible by tp*cp*pp = 2 (tp 1, cp 2, pp 1)"},
      // One rank cannot hold ep = 2 (a dense model with ep > 1 on ranks that can: tests/tools/test_expert_parallel_parity.cpp).
      {[](BBConfig& b) { b.parallel.ep = 2; }, "is not divisible by etp*ep = 2 (etp 1, ep 2)"},
      // One rank cannot hold etp = 2 (etp runs: tests/tools/test_expert_parallel_parity.cpp).
      {[](BBConfig& b) { b.parallel.etp = 2; }, "is not divisible by etp*ep = 2 (etp 2, ep 1)"},
      // Set through the C++ API, past the schema's range check.
      {[](BBConfig& b) { b.optimizer.offload_fraction = 1.5; }, "optimizer.offload_fraction must lie in [0, 1], got 1.5"},
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
