// Many small gradient buckets, reduce-scattered while backward runs, give the
// numbers of one bucket (losses, grad norms, parameters after 3 AdamW steps)
// under mpirun for dp 2, dp 4, tp 2 x dp 2, and dp 5 (buckets padded to dp).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bumblebee/core/rng.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "tests/model/hf_fixture.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

nlohmann::json run_correctness(int ranks, int tp, int64_t bucket_size, const std::string& tokens,
                               const std::string& params_out) {
  const std::string cmd = test::mpirun(ranks) + test::tool("bb-correctness") + " hf_path=" +
                          test::fixture_dir("qwen3_tp") + " tokens=" + tokens +
                          " steps=3 optimizer.lr=0.01 optimizer.adam_beta2=0.95 optimizer.weight_decay=0.1"
                          " optimizer.clip_grad=1.0 backend.parallel.tp=" + std::to_string(tp) +
                          " optimizer.grad_bucket_size=" + std::to_string(bucket_size) + " params_out=" + params_out;
  const test::ToolResult r = test::run_command(cmd);
  EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
  return test::last_json_line(r.out);
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

std::string synthetic_tokens(const fs::path& dir) {
  Generator gen(11);
  nlohmann::json j = nlohmann::json::array();
  for (int s = 0; s < 10; ++s) {
    nlohmann::json row = nlohmann::json::array();
    for (int t = 0; t < 9; ++t) row.push_back(int(gen.next_u64() % 157));
    j.push_back(row);
  }
  const std::string path = (dir / "tokens.json").string();
  std::ofstream(path) << j.dump();
  return path;
}

struct Layout {
  int tp, dp;
};

class GradBucketParity : public ::testing::TestWithParam<Layout> {};

TEST_P(GradBucketParity, ManySmallBucketsMatchOneBucket) {
  const auto [tp, dp] = GetParam();
  const std::string tag = "tp" + std::to_string(tp) + "_dp" + std::to_string(dp);
  const fs::path tmp = fs::temp_directory_path() / ("bb_buckets_" + std::to_string(::getpid()) + "_" + tag);
  fs::create_directories(tmp);
  const std::string tokens = synthetic_tokens(tmp);
  // 1000 elements: about one bucket per weight matrix of the fixture (~20 buckets).
  const nlohmann::json one = run_correctness(tp * dp, tp, int64_t(1) << 40, tokens, (tmp / "one").string());
  const nlohmann::json many = run_correctness(tp * dp, tp, 1000, tokens, (tmp / "many").string());
  EXPECT_LT(rel(many["loss"], one["loss"]), 1e-10) << tag;
  ASSERT_EQ(many["losses"].size(), 3u) << tag;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LT(rel(many["losses"][i], one["losses"][i]), 1e-10) << tag << " step " << i;
    EXPECT_LT(rel(many["grad_norms"][i], one["grad_norms"][i]), 1e-10) << tag << " step " << i;
  }
  HFCheckpoint a = HFCheckpoint::open((tmp / "many").string()), b = HFCheckpoint::open((tmp / "one").string());
  ASSERT_EQ(a.names(), b.names()) << tag;
  for (const std::string& n : a.names()) {
    const std::vector<double> u = a.get(n).to_doubles(), v = b.get(n).to_doubles();
    double err = 0, norm = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      err = std::max(err, std::abs(u[i] - v[i]));
      norm = std::max(norm, std::abs(v[i]));
    }
    EXPECT_LT(err / norm, 1e-10) << tag << " parameter " << n;
  }
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GradBucketParity,
                         ::testing::Values(Layout{1, 2}, Layout{1, 4}, Layout{2, 2}, Layout{1, 5}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_dp" + std::to_string(info.param.dp);
                         });

}  // namespace
}  // namespace bb
#endif
