// Launcher detection from environment variables.
#include "bumblebee/distributed/launch.h"

#include <cstdlib>
#include <string>

#include "bumblebee/core/error.h"

namespace bb::dist {

namespace {

int env_int(const EnvLookup& env, const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  BB_CHECK(end != v && *end == '\0' && x >= 0 && x < (1L << 30), "environment variable ", name, "='", v,
           "' is not a rank or rank count");
  return int(x);
}

bool has(const EnvLookup& env, const char* name) { return env(name) != nullptr; }

}  // namespace

Launch detect_launch(const EnvLookup& env) {
  Launch l;
  if (has(env, "OMPI_COMM_WORLD_SIZE")) {
    const char* by = env("BB_LAUNCHER");
    l.launcher = by && std::string(by) == "bbrun" ? "bbrun" : "mpirun";
    l.mpi = true;
    l.size = env_int(env, "OMPI_COMM_WORLD_SIZE", 1);
    l.rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0);
    l.local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", -1);
    return l;
  }
  // SLURM_STEP_NUM_TASKS is set by srun for its step, not in a batch script's
  // own shell, so a single tool run inside sbatch stays a single process.
  if (has(env, "SLURM_STEP_NUM_TASKS") && has(env, "SLURM_PROCID")) {
    l.launcher = "srun";
    l.size = env_int(env, "SLURM_STEP_NUM_TASKS", 1);
    l.rank = env_int(env, "SLURM_PROCID", 0);
    l.local_rank = env_int(env, "SLURM_LOCALID", -1);
    bool pmi = has(env, "PMIX_RANK") || has(env, "PMIX_NAMESPACE") || has(env, "PMI_RANK") || has(env, "PMI_FD");
    BB_CHECK(l.size == 1 || pmi, "srun started ", l.size, " tasks without an MPI plugin, so each would run alone "
             "as rank 0; launch with srun --mpi=pmix (or --mpi=pmi2)");
    l.mpi = l.size > 1;
    return l;
  }
  if (has(env, "PMI_SIZE") && has(env, "PMI_RANK")) {
    l.launcher = "mpiexec";
    l.mpi = true;
    l.size = env_int(env, "PMI_SIZE", 1);
    l.rank = env_int(env, "PMI_RANK", 0);
    l.local_rank = env_int(env, "MPI_LOCALRANKID", -1);
    return l;
  }
  if (has(env, "PMIX_RANK")) {
    // A PMIx launcher (prterun, srun without SLURM variables) that does not
    // say the world size; MPI will.
    l.launcher = "mpirun";
    l.mpi = true;
    l.size = 0;
    l.rank = env_int(env, "PMIX_RANK", 0);
    return l;
  }
  return l;
}

Launch detect_launch() {
  return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

void check_launch_supported(const Launch& launch, bool mpi_built) {
  BB_CHECK(mpi_built || launch.size <= 1, "this build has no MPI, but ", launch.launcher, " started ",
           launch.size == 0 ? std::string("an unknown number of") : std::to_string(launch.size),
           " ranks; rebuild Bumblebee with MPI (e.g. apt install libopenmpi-dev) or run a single process");
}

}  // namespace bb::dist
