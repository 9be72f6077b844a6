// Launch: how this process was started, read from the launcher's environment.
//
// mpirun (and bbrun, which wraps it) sets OMPI_COMM_WORLD_*; SLURM's srun sets
// SLURM_STEP_NUM_TASKS / SLURM_PROCID / SLURM_LOCALID and, with --mpi=pmix or
// pmi2, PMIX_* or PMI_* so MPI can wire up; MPICH's mpiexec sets PMI_*.
// Anything else is a plain single process. Reading is pure (the environment
// is passed in), so every launcher case is unit-tested.
#pragma once

#include <functional>
#include <string>

namespace bb::dist {

struct Launch {
  std::string launcher = "none";   // "mpirun", "bbrun", "srun", "mpiexec" or "none"
  bool mpi = false;                // the launcher wires processes through MPI
  int size = 1;                    // ranks the launcher started; 0 when it does not say
  int rank = 0;                    // this process's rank per the launcher (0 when it does not say)
  int local_rank = -1;             // rank on this node; -1 when the launcher does not say
};

using EnvLookup = std::function<const char*(const char*)>;   // nullptr when unset

// Throws bb::Error when the environment is contradictory, e.g. srun started
// several tasks without an MPI plugin (each would run alone as rank 0).
Launch detect_launch(const EnvLookup& env);
Launch detect_launch();   // the process environment

// Throws bb::Error naming the launcher and rank count when the launch needs
// MPI (more than one rank) but this build has none.
void check_launch_supported(const Launch& launch, bool mpi_built);

}  // namespace bb::dist
