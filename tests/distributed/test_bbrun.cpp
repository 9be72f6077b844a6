// tools/bbrun: the mpirun line it builds (--dry-run), its argument errors, and a real two-rank launch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

struct Outcome {
  int exit_code;
  std::string output;   // stdout and stderr
};

Outcome run(const std::string& args) {
  std::string cmd = std::string(BB_SOURCE_DIR) + "/tools/bbrun " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Outcome r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Bbrun, DryRunBuildsTheMpirunLine) {
  Outcome r = run("--dry-run --nproc-per-node=4 prog a 'b c'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("mpirun -np 4 ", 0), 0u) << r.output;
  EXPECT_EQ(contains(r.output, "--allow-run-as-root"), geteuid() == 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--oversubscribe --bind-to none")) << r.output;
  EXPECT_TRUE(contains(r.output, "-x NCCL_NVLS_ENABLE")) << r.output;
  EXPECT_TRUE(contains(r.output, "-x BB_LAUNCHER")) << r.output;
  EXPECT_TRUE(contains(r.output, "prog a b\\ c")) << r.output;
}

TEST(Bbrun, MultiNodePlacesProcessesPerHost) {
  Outcome r = run("--dry-run --nproc-per-node=2 --nnodes=2 --hosts=n1,n2 prog");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "mpirun -np 4 ")) << r.output;
  EXPECT_TRUE(contains(r.output, "--host n1:2\\,n2:2 --map-by ppr:2:node")) << r.output;
}

TEST(Bbrun, BadArgumentsSayWhy) {
  Outcome r = run("--nproc-per-node=0 prog");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "--nproc-per-node must be a positive integer, got '0'")) << r.output;
  r = run("--nproc-per-node=2 --nnodes=2 prog");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "--nnodes=2 needs --hosts=h1,h2,... or --hostfile=FILE")) << r.output;
  r = run("--nproc-per-node=2 --nnodes=2 --hosts=a,b,c prog");
  EXPECT_TRUE(contains(r.output, "--nnodes=2 but --hosts names 3 hosts")) << r.output;
  r = run("--nproc-per-node=2 --node-rank=1 prog");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "--node-rank is a torchrun option")) << r.output;
  r = run("--nproc-per-node=2");
  EXPECT_TRUE(contains(r.output, "no command given")) << r.output;
}

// Two real processes: World sees bbrun as the launcher and MPI wires them.
TEST(Bbrun, LaunchesTwoRanks) {
  const std::string tests = std::string(BB_BINARY_DIR) + "/bin/bb_mpi_tests";
  if (!std::filesystem::exists(tests)) GTEST_SKIP() << "bb_mpi_tests not built (no MPI)";
  Outcome r = run("--nproc-per-node=2 " + tests + " --gtest_filter='MpiWorld.*'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "bb_mpi_tests on 2 ranks: every rank passed")) << r.output;
}
