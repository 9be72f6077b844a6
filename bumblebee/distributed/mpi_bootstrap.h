// The MPI side of World, as plain C++ declarations so world.cpp compiles in
// builds without MPI. Defined in world_mpi.cpp, which only MPI builds compile.
#pragma once

#include <memory>
#include <string>

#include "bumblebee/distributed/communicator.h"

namespace bb::dist::mpi {

struct Started {
  int rank = 0;
  int size = 1;
};

// MPI_Init_thread (SERIALIZED) unless MPI is already initialised by the caller,
// in which case stop() leaves finalising to it too.
Started start();
void stop();
int node_local_rank();   // rank among the processes sharing this node's memory
std::shared_ptr<Communicator> world_communicator();
std::shared_ptr<Communicator> split_world(int color, int key, const std::string& name);
[[noreturn]] void abort(int exit_code);

}  // namespace bb::dist::mpi
