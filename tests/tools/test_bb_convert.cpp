// bb-convert hf_to_bb's host memory: a synthetic 235 MB float32 Qwen3
// checkpoint (8 layers, hidden 512, vocabulary 32768, untied head; four
// safetensors shards), written here a tensor at a time and removed after, is
// imported at 1 rank, tp=2 and pp=2 (mpirun -np 2, CPU). Each rank's peak
// resident set (VmHWM, anonymous and file-backed pages together) may grow over
// its start by at most its own state (the parameter shard with its gradients
// and Adam moments: what the rank holds and writes) plus the largest tensor
// plus 96 MB of fixed slack (the save's buffers, allocator arenas and huge
// pages, MPI), and at 2 ranks by at most 2/3 of what the one-rank run, which
// holds the whole model, grows by (a rank holding its half of the state plus
// every full weight would need 3/4). Measured alone: 1 rank +960 MB, each of 2
// ranks +475..508 MB; the bounds leave room for a loaded CI machine.
// docs/checkpoints.md, "Import memory", has the figures.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/safetensors.h"
#include "tests/tools/tool_runner.h"

namespace bb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kSlackBytes = 96ull << 20;

// Writes the model in four shards with model.safetensors.index.json, every
// weight 0.01 (finite, so the import's value check passes).
void write_synthetic_qwen3(const fs::path& dir) {
  const int64_t h = 512, inter = 1536, layers = 8, vocab = 32768, heads = 8, kv_heads = 4, head_dim = 64;
  fs::create_directories(dir);
  const json config{{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"hidden_size", h},
                    {"intermediate_size", inter}, {"num_hidden_layers", layers}, {"num_attention_heads", heads},
                    {"num_key_value_heads", kv_heads}, {"head_dim", head_dim}, {"vocab_size", vocab},
                    {"rms_norm_eps", 1e-6}, {"rope_theta", 1e6}, {"tie_word_embeddings", false},
                    {"max_position_embeddings", 4096}, {"hidden_act", "silu"}, {"attention_bias", false},
                    {"dtype", "float32"}};
  std::ofstream(dir / "config.json") << config.dump();
  std::vector<std::pair<std::string, Shape>> tensors = {{"model.embed_tokens.weight", {vocab, h}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.insert(tensors.end(), {{p + "input_layernorm.weight", {h}},
                                   {p + "post_attention_layernorm.weight", {h}},
                                   {p + "self_attn.q_proj.weight", {heads * head_dim, h}},
                                   {p + "self_attn.k_proj.weight", {kv_heads * head_dim, h}},
                                   {p + "self_attn.v_proj.weight", {kv_heads * head_dim, h}},
                                   {p + "self_attn.o_proj.weight", {h, heads * head_dim}},
                                   {p + "self_attn.q_norm.weight", {head_dim}},
                                   {p + "self_attn.k_norm.weight", {head_dim}},
                                   {p + "mlp.gate_proj.weight", {inter, h}},
                                   {p + "mlp.up_proj.weight", {inter, h}},
                                   {p + "mlp.down_proj.weight", {h, inter}}});
  }
  tensors.insert(tensors.end(), {{"model.norm.weight", {h}}, {"lm_head.weight", {vocab, h}}});
  const size_t shards = 4, per_shard = (tensors.size() + shards - 1) / shards;
  json weight_map = json::object();
  for (size_t s = 0; s < shards; ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    SafetensorsStreamWriter writer((dir / file).string(), {{"format", "pt"}});
    for (size_t i = s * per_shard; i < std::min(tensors.size(), (s + 1) * per_shard); ++i) {
      Tensor t = Tensor::empty(tensors[i].second, DType::F32);
      std::fill_n(static_cast<float*>(t.raw()), t.numel(), 0.01f);
      writer.add(tensors[i].first, t);
      weight_map[tensors[i].first] = file;
    }
    writer.close();
  }
  std::ofstream(dir / "model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump();
}

class ImportMemory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("bb_import_memory_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    write_synthetic_qwen3(root_ / "hf");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // bb-convert hf_to_bb at `ranks` with `layout`; its JSON line. The progress
  // bar (stderr) goes to a file of its own: mpirun forwards both streams
  // through one pipe, and a bar update can land inside the JSON line.
  static json import(int ranks, const std::string& layout, const std::string& out) {
    const fs::path progress = root_ / (out + ".progress");
    std::string cmd = test::tool("bb-convert") + " hf_to_bb in=" + (root_ / "hf").string() + " out=" +
                      (root_ / out).string() + " " + layout;
    if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
    const test::ToolResult r = test::run_command(cmd + " 2>" + progress.string(), 300);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out << test::read_bytes(progress);
    std::cout << r.out.substr(r.out.find("rank ") == std::string::npos ? 0 : r.out.find("rank ")) << std::endl;
    fs::remove_all(root_ / out);
    return test::last_json_line(r.out);
  }

  // The one-rank import, run once for both tests.
  static const json& one_rank() {
    static const json one = import(1, "", "one");
    return one;
  }

  static uint64_t growth(const json& rank) {
    return rank["peak_rss"].get<uint64_t>() - rank["baseline_rss"].get<uint64_t>();
  }

  // Every rank within its own state plus the largest tensor plus the slack.
  static void expect_bounded(const json& report, size_t ranks, const std::string& tag) {
    ASSERT_EQ(report["import_memory"].size(), ranks) << tag;
    const uint64_t largest = report["largest_tensor_bytes"];
    for (size_t r = 0; r < ranks; ++r) {
      const json& m = report["import_memory"][r];
      EXPECT_LE(growth(m), m["state_bytes"].get<uint64_t>() + largest + kSlackBytes) << tag << " rank " << r << ": " << report.dump();
      EXPECT_GT(m["shard_bytes"].get<uint64_t>(), 0u) << tag << " rank " << r;
    }
  }

  static fs::path root_;
};
fs::path ImportMemory::root_;

TEST_F(ImportMemory, OneRankWithinItsStatePlusOneTensor) {
  const json& one = one_rank();
  expect_bounded(one, 1, "1 rank");
  EXPECT_EQ(one["import_memory"][0]["shard_bytes"], one["model_bytes"]);
}

#ifdef BB_WITH_MPI
TEST_F(ImportMemory, TwoRanksHoldHalfTheModel) {
  const uint64_t whole = growth(one_rank()["import_memory"][0]);
  for (const std::string& layout : {"backend.parallel.tp=2", "backend.parallel.pp=2"}) {
    const json two = import(2, layout, "two");
    expect_bounded(two, 2, layout);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_LE(growth(two["import_memory"][r]), whole * 2 / 3) << layout << " rank " << r << ": " << two.dump();
      EXPECT_LT(two["import_memory"][r]["shard_bytes"].get<uint64_t>(), two["model_bytes"].get<uint64_t>() * 6 / 10)
          << layout << " rank " << r;
    }
  }
}
#endif

}  // namespace
}  // namespace bb
