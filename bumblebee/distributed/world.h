// World: every process of this run, bootstrapped from the launcher.
//
// The first World::instance() reads how the process was started (launch.h).
// Under mpirun, bbrun, srun --mpi=pmix or mpiexec it initialises MPI
// (MPI_Init_thread, SERIALIZED: one thread at a time calls MPI, the one that
// bootstrapped except while it hands the work to another and waits, as the
// Python binding's export_weights generator does) and
// checks that MPI sees as many ranks as the launcher started; otherwise the
// world is this one process and MPI is never touched. MPI is finalised when
// the process exits. A build without MPI asked for more than one rank fails
// with an error that says so.
#pragma once

#include <memory>
#include <string>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/distributed/launch.h"

namespace bb::dist {

class World {
 public:
  static World& instance();

  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }   // rank among the processes of this node: its GPU
  bool uses_mpi() const { return uses_mpi_; }
  const Launch& launch() const { return launch_; }

  Communicator& comm() { return *comm_; }
  std::shared_ptr<Communicator> communicator() const { return comm_; }

  // Collective over the world: ranks passing the same color (>= 0) form one
  // group, ordered by key, ties broken by world rank. `name` labels the group
  // in error messages.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name);

  // Ends every process of the run with `exit_code`, so that a rank that hit an
  // error does not leave the others waiting in a collective.
  [[noreturn]] void abort(int exit_code);

 private:
  World();
  ~World();

  Launch launch_;
  bool uses_mpi_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  std::shared_ptr<Communicator> comm_;
};

}  // namespace bb::dist
