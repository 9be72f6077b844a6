// bb-correctness as a user runs it: one JSON object on stdout, or one error line.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "tests/model/hf_fixture.h"

namespace {

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(BB_BINARY_DIR) + "/bin/bb-correctness " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

// A LoRA adapter saved after one step and loaded by a second run gives the
// loss the first run's second step starts from.
TEST(BBCorrectness, AdapterOutReloadsAsTheTrainedAdapter) {
  const std::string dir = bb::test::fixture_dir("qwen3_gqa");
  const std::string adapter = ::testing::TempDir() + "/bb_correctness_adapter";
  const std::string common = "hf_path=" + dir + " tokens=" + dir + "/tokens.json optimizer.lr=0.01 peft.type=lora " +
                             "peft.target_modules=all-linear peft.rank=2 peft.alpha=4";
  Result one = run(common + " steps=1 adapter_out=" + adapter);
  ASSERT_EQ(one.code, 0) << one.out;
  Result reloaded = run(common + " steps=0 peft.adapter_path=" + adapter);
  ASSERT_EQ(reloaded.code, 0) << reloaded.out;
  Result two = run(common + " steps=2");
  ASSERT_EQ(two.code, 0) << two.out;
  const double after_one_step = nlohmann::json::parse(two.out)["losses"][1].get<double>();
  const double loss = nlohmann::json::parse(reloaded.out)["loss"].get<double>();
  EXPECT_NE(loss, nlohmann::json::parse(one.out)["loss"].get<double>());   // the step changed the adapter
  EXPECT_NEAR(loss, after_one_step, 1e-12 * after_one_step);
}

TEST(BBCorrectness, PrintsReferenceFieldsMatchingHF) {
  const std::string dir = bb::test::fixture_dir("llama3_gqa");
  const nlohmann::json ref = bb::test::read_json(dir + "/reference.json");
  const std::string logits = ::testing::TempDir() + "/bb_logits.bin";
  Result r = run("hf_path=" + dir + " tokens=" + dir + "/tokens.json steps=2 optimizer.lr=0.01 " +
                 "optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95 optimizer.weight_decay=0.1 logits_out=" + logits);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["loss"].get<double>(), ref["loss"].get<double>(), 1e-9 * ref["loss"].get<double>());
  EXPECT_NEAR(j["grad_norm"].get<double>(), ref["grad_norm"].get<double>(), 1e-9 * ref["grad_norm"].get<double>());
  EXPECT_EQ(j["per_param_grad_norm"].size(), ref["per_param_grad_norm"].size());
  ASSERT_EQ(j["losses"].size(), 2u);
  EXPECT_NEAR(j["losses"][1].get<double>(), ref["losses"][1].get<double>(), 1e-8);
  FILE* f = fopen(logits.c_str(), "rb");
  ASSERT_TRUE(f);
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f);
  fclose(f);
  const auto shape = ref["logits_shape"];
  EXPECT_EQ(bytes, long(4 * shape[0].get<long>() * shape[1].get<long>() * shape[2].get<long>()));
}

// Experts stored fused (transformers 5's save_original_format=False) are
// reported as the fused tensors HF names, each norm over the whole tensor.
TEST(BBCorrectness, FusedExpertsUnderTheCheckpointNames) {
  const std::string dir = bb::test::fixture_dir("qwen3_moe_fused");
  const nlohmann::json ref = bb::test::read_json(dir + "/reference.json");
  Result r = run("hf_path=" + dir + " tokens=" + dir + "/tokens.json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(ref["per_param_grad_norm"].contains("model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_EQ(j["per_param_grad_norm"].size(), ref["per_param_grad_norm"].size());
  for (const auto& [name, norm] : ref["per_param_grad_norm"].items()) {
    ASSERT_TRUE(j["per_param_grad_norm"].contains(name)) << name;
    EXPECT_NEAR(j["per_param_grad_norm"][name].get<double>(), norm.get<double>(), 1e-8 * norm.get<double>()) << name;
  }
}

TEST(BBCorrectness, UnknownKeyIsOneErrorLine) {
  Result r = run("hf_path=x tokens=y optimizer.learning_rate=1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("error: unknown key 'optimizer.learning_rate'"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(BBCorrectness, MissingModelDirectoryIsAnError) {
  Result r = run("hf_path=/nonexistent tokens=/nonexistent.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
}

}  // namespace
