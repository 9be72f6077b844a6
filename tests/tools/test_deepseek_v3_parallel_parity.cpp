// DeepSeek-V3 under mpirun reproduces the single-rank float64 run of
// bb-correctness (loss, grad norm, per-parameter grad norms, 3 AdamW steps,
// the exported parameters) to 1e-10, on both HF fixtures (MLA with and
// without q_lora_rank): tensor parallelism (heads split, the compressed kv
// path replicated), expert parallelism, expert tensor parallelism, data
// parallelism, tp with ep carved across it, and a two-stage pipeline; and
// on the multi-token prediction fixture (its loss, the MTP layer's
// parameters) under tp, ep, dp, tp x ep and a pipeline whose last stage
// holds the MTP layer (`m`).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/model/hf_fixture.h"
#include "tests/tools/parity_support.h"
#include "tests/tools/tool_runner.h"

#ifdef BB_WITH_MPI
namespace bb {
namespace {

namespace fs = std::filesystem;

struct Layout {
  std::string fixture, name, args;
  int ranks = 2;
};

class DeepseekV3ParallelParity : public ::testing::TestWithParam<Layout> {
 protected:
  static fs::path tmp() { return fs::temp_directory_path() / ("bb_dsv3_" + std::to_string(::getpid())); }
  static const std::string& tokens() {
    static const std::string t = test::random_tokens_file("bb_dsv3_tokens", 11, 8, 9, 83);   // the smallest vocab
    return t;
  }
  static nlohmann::json run(const std::string& fixture, int ranks, const std::string& args, const fs::path& out) {
    std::string cmd = test::tool("bb-correctness") + " hf_path=" + test::fixture_dir(fixture) + " tokens=" +
                      tokens() + " steps=3 num_microbatches=2 optimizer.lr=0.01 optimizer.weight_decay=0.1" + args +
                      " params_out=" + out.string();
    if (ranks > 1) cmd = test::mpirun(ranks) + cmd;
    const test::ToolResult r = test::run_command(cmd, 300);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    return test::last_json_line(r.out);
  }
  static const nlohmann::json& single(const std::string& fixture) {
    static std::map<std::string, nlohmann::json> runs;
    fs::create_directories(tmp());
    if (!runs.count(fixture)) runs[fixture] = run(fixture, 1, "", tmp() / ("single_" + fixture));
    return runs[fixture];
  }
  static void TearDownTestSuite() {
    fs::remove_all(tmp());
    fs::remove(tokens());
  }
};

TEST_P(DeepseekV3ParallelParity, MatchesSingleRank) {
  const Layout& l = GetParam();
  const nlohmann::json& one = single(l.fixture);
  const fs::path out = tmp() / (l.fixture + "_" + l.name);
  const nlohmann::json par = run(l.fixture, l.ranks, l.args, out);
  test::expect_same_run(par, one, l.fixture + " " + l.name, 1e-10);
  test::expect_same_params(out.string(), (tmp() / ("single_" + l.fixture)).string(), l.fixture + " " + l.name);
}

std::vector<Layout> layouts() {
  std::vector<Layout> v;
  for (const std::string f : {"deepseek_v3_mla", "deepseek_v3_qproj"}) {
    v.push_back({f, "tp2", " backend.parallel.tp=2"});
    v.push_back({f, "ep2", " backend.parallel.ep=2"});
    v.push_back({f, "dp2", ""});
    v.push_back({f, "pp2", " backend.parallel.pp=2 'backend.parallel.pp_layout=E,t,t|t,L'"});
    v.push_back({f, "tp2_ep4_etp1", " backend.parallel.tp=2 backend.parallel.ep=4 backend.parallel.etp=1", 4});
    v.push_back({f, "tp2_etp2_ep2", " backend.parallel.tp=2 backend.parallel.etp=2 backend.parallel.ep=2", 4});
  }
  const std::string mtp = "deepseek_v3_mtp";
  v.push_back({mtp, "tp2", " backend.parallel.tp=2"});
  v.push_back({mtp, "ep2", " backend.parallel.ep=2"});
  v.push_back({mtp, "dp2", ""});
  v.push_back({mtp, "pp2", " backend.parallel.pp=2 'backend.parallel.pp_layout=E,t|t,m,L'"});
  v.push_back({mtp, "tp2_ep4_etp1", " backend.parallel.tp=2 backend.parallel.ep=4 backend.parallel.etp=1", 4});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DeepseekV3ParallelParity, ::testing::ValuesIn(layouts()),
                         [](const auto& info) { return info.param.fixture + "_" + info.param.name; });

// Context parallelism: each sequence split over cp in zigzag order, ring
// attention over MLA's [nope | rope] q/k and its own v head dim, rope at the
// global positions; alone and with tp (heads split as well). A suite of its
// own, with its own single-rank runs: the suite above removes its files when
// it ends.
class DeepseekV3ContextParallelParity : public DeepseekV3ParallelParity {
 protected:
  static void SetUpTestSuite() {
    test::random_tokens_file("bb_dsv3_tokens", 11, 8, 9, 89);   // tokens()'s file again: same path and seed
    fs::create_directories(tmp());
  }
};

TEST_P(DeepseekV3ContextParallelParity, MatchesSingleRank) {
  const Layout& l = GetParam();
  static std::map<std::string, nlohmann::json> singles;
  const fs::path single_dir = tmp() / ("cp_single_" + l.fixture);
  if (!singles.count(l.fixture)) singles[l.fixture] = run(l.fixture, 1, "", single_dir);
  const fs::path out = tmp() / (l.fixture + "_" + l.name);
  const nlohmann::json par = run(l.fixture, l.ranks, l.args, out);
  test::expect_same_run(par, singles[l.fixture], l.fixture + " " + l.name, 1e-10);
  test::expect_same_params(out.string(), single_dir.string(), l.fixture + " " + l.name);
}

std::vector<Layout> context_parallel_layouts() {
  std::vector<Layout> v;
  for (const std::string f : {"deepseek_v3_mla", "deepseek_v3_qproj"}) {
    v.push_back({f, "cp2", " backend.parallel.cp=2"});
    v.push_back({f, "tp2_cp2", " backend.parallel.tp=2 backend.parallel.cp=2", 4});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DeepseekV3ContextParallelParity, ::testing::ValuesIn(context_parallel_layouts()),
                         [](const auto& info) { return info.param.fixture + "_" + info.param.name; });

}  // namespace
}  // namespace bb
#endif
