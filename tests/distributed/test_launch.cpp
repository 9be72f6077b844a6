// Launcher detection from fake environments: mpirun, bbrun, srun, mpiexec, none.
#include "bumblebee/distributed/launch.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "bumblebee/core/error.h"

using bb::dist::detect_launch;
using bb::dist::Launch;

namespace {

Launch launch_from(const std::map<std::string, std::string>& vars) {
  return detect_launch([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST(Launch, PlainProcessIsOneRankWithoutMpi) {
  Launch l = launch_from({{"HOME", "/root"}});
  EXPECT_EQ(l.launcher, "none");
  EXPECT_FALSE(l.mpi);
  EXPECT_EQ(l.size, 1);
  EXPECT_EQ(l.rank, 0);
}

TEST(Launch, Mpirun) {
  Launch l = launch_from({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(l.launcher, "mpirun");
  EXPECT_TRUE(l.mpi);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.local_rank, 1);
}

TEST(Launch, Bbrun) {
  Launch l = launch_from({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"BB_LAUNCHER", "bbrun"}});
  EXPECT_EQ(l.launcher, "bbrun");
  EXPECT_TRUE(l.mpi);
  EXPECT_EQ(l.size, 2);
  EXPECT_EQ(l.local_rank, -1);
}

TEST(Launch, SrunWithPmix) {
  Launch l = launch_from({{"SLURM_STEP_NUM_TASKS", "16"}, {"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "9"},
                          {"SLURM_LOCALID", "1"}, {"PMIX_RANK", "9"}});
  EXPECT_EQ(l.launcher, "srun");
  EXPECT_TRUE(l.mpi);
  EXPECT_EQ(l.size, 16);
  EXPECT_EQ(l.rank, 9);
  EXPECT_EQ(l.local_rank, 1);
}

TEST(Launch, SrunWithoutMpiPluginIsAnError) {
  try {
    launch_from({{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
    FAIL() << "expected an error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("srun started 4 tasks without an MPI plugin"), std::string::npos)
        << e.what();
  }
}

TEST(Launch, SrunSingleTaskNeedsNoMpi) {
  Launch l = launch_from({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}});
  EXPECT_EQ(l.launcher, "srun");
  EXPECT_FALSE(l.mpi);
  EXPECT_EQ(l.size, 1);
}

// Inside an sbatch script (no srun step) a tool runs as one process even
// though the job has many tasks.
TEST(Launch, BatchScriptShellIsOneProcess) {
  Launch l = launch_from({{"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "42"}});
  EXPECT_EQ(l.launcher, "none");
  EXPECT_FALSE(l.mpi);
}

TEST(Launch, MpichMpiexec) {
  Launch l = launch_from({{"PMI_SIZE", "3"}, {"PMI_RANK", "2"}, {"MPI_LOCALRANKID", "0"}});
  EXPECT_EQ(l.launcher, "mpiexec");
  EXPECT_TRUE(l.mpi);
  EXPECT_EQ(l.size, 3);
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.local_rank, 0);
}

TEST(Launch, MalformedCountIsAnError) {
  EXPECT_THROW(launch_from({{"OMPI_COMM_WORLD_SIZE", "four"}}), bb::Error);
}

TEST(Launch, ManyRanksWithoutMpiBuildIsAnError) {
  Launch l = launch_from({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  EXPECT_NO_THROW(bb::dist::check_launch_supported(l, true));
  try {
    bb::dist::check_launch_supported(l, false);
    FAIL() << "expected an error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("this build has no MPI, but mpirun started 4 ranks"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(bb::dist::check_launch_supported(launch_from({}), false));
}
