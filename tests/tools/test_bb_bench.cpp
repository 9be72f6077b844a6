// bb-bench as a user runs it: per-step lines, the memory by category, one
// JSON summary, and with bench.profile_steps the per-op breakdown of a step.
#include <gtest/gtest.h>

#include "tests/model/hf_fixture.h"
#include "tests/tools/tool_runner.h"

namespace bb {
namespace {

TEST(BBBench, ProfileStepsBreakDownAStepByOp) {
  const std::string dir = test::fixture_dir("qwen3_gqa");
  const test::ToolResult r = test::run_command(test::tool("bb-bench") + " hf_path=" + dir +
                                               " bench.seq_len=16 bench.micro_batch_size=2 bench.steps=2 "
                                               "bench.warmup=1 bench.profile_steps=2 "
                                               // one parameter group (no separate group for 1-D weights)
                                               "optimizer.no_weight_decay_1d=false");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("profile over 2 steps"), std::string::npos) << r.out;
  const nlohmann::json j = test::last_json_line(r.out);
  EXPECT_EQ(j["num_layers"], 2);
  const nlohmann::json& p = j["profile"];
  EXPECT_GT(p["step_ms"].get<double>(), 0.0);
  EXPECT_EQ(p["comm_ms_per_step"].get<double>(), 0.0);   // one rank on the host: no NCCL
  double share = 0, attention_calls = -1, adamw_calls = -1;
  for (const auto& op : p["ops"]) {
    share += op["share_of_step"].get<double>();
    if (op["op"] == "attention_forward") attention_calls = op["calls_per_step"].get<double>();
    if (op["op"] == "adamw_step") adamw_calls = op["calls_per_step"].get<double>();
  }
  // Groups add up the ops; only GEMMs carry FLOPs.
  double group_ms = 0, op_ms = 0;
  for (const auto& g : p["groups"]) {
    group_ms += g["ms_per_step"].get<double>();
    EXPECT_EQ(g.contains("tflops"), g["group"] == "gemm") << g.dump();
  }
  for (const auto& op : p["ops"]) op_ms += op["ms_per_step"].get<double>();
  EXPECT_NEAR(group_ms, op_ms, 1e-9 * op_ms);
  // Two layers: one attention per layer and microbatch; the optimizer steps once over the flat buffer.
  EXPECT_EQ(attention_calls, 2.0);
  EXPECT_EQ(adamw_calls, 1.0);
  // The ops are part of the step, and most of it on the host.
  EXPECT_GT(share, 0.3);
  EXPECT_LT(share, 1.0);
}

TEST(BBBench, MemoryBreakdownAddsUpToThePeak) {
  const std::string dir = test::fixture_dir("qwen3_gqa");
  const test::ToolResult r = test::run_command(test::tool("bb-bench") + " hf_path=" + dir +
                                               " bench.seq_len=16 bench.steps=1 bench.warmup=0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("memory (GiB): weights"), std::string::npos) << r.out;
  const nlohmann::json m = test::last_json_line(r.out)["memory"];
  const double w = m["weights_gb"].get<double>();
  ASSERT_GT(w, 0.0);
  // float32 on the host: the parameters are their own master weights; one
  // gradient and two Adam moments per weight.
  EXPECT_EQ(m["master_gb"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(m["grads_gb"].get<double>(), w);
  EXPECT_DOUBLE_EQ(m["moments_gb"].get<double>(), 2 * w);
  EXPECT_GT(m["activations_and_workspace_gb"].get<double>(), 0.0);
  double sum = 0;
  for (const char* k : {"weights_gb", "grads_gb", "master_gb", "moments_gb", "other_static_gb",
                        "activations_and_workspace_gb"})
    sum += m[k].get<double>();
  EXPECT_NEAR(sum, m["peak_gb"].get<double>(), 1e-12);
}

TEST(BBBench, OffloadedOptimizerStateIsReportedAsHostMemory) {
  const std::string dir = test::fixture_dir("qwen3_gqa");
  const test::ToolResult r = test::run_command(test::tool("bb-bench") + " hf_path=" + dir +
                                               " bench.seq_len=16 bench.steps=1 bench.warmup=0 optimizer.offload_fraction=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("host memory (GiB, optimizer.offload_fraction 1): master"), std::string::npos) << r.out;
  const nlohmann::json j = test::last_json_line(r.out);
  EXPECT_EQ(j["offload_fraction"].get<double>(), 1.0);
  const nlohmann::json& m = j["memory"];
  const double w = m["weights_gb"].get<double>();
  EXPECT_EQ(m["moments_gb"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(m["host_moments_gb"].get<double>(), 2 * w);
  EXPECT_DOUBLE_EQ(m["host_master_gb"].get<double>(), w);
  // A CPU runtime: the host part is in the same pool, so the categories and it make up the peak.
  double sum = 0;
  for (const char* k : {"weights_gb", "grads_gb", "master_gb", "moments_gb", "other_static_gb",
                        "activations_and_workspace_gb", "host_master_gb", "host_moments_gb", "host_staging_gb"})
    sum += m[k].get<double>();
  EXPECT_NEAR(sum, m["peak_gb"].get<double>(), 1e-12);
}

TEST(BBBench, RejectsNegativeProfileSteps) {
  const std::string dir = test::fixture_dir("qwen3_gqa");
  const test::ToolResult r = test::run_command(test::tool("bb-bench") + " hf_path=" + dir + " bench.profile_steps=-1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("bench.profile_steps >= 0"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace bb
