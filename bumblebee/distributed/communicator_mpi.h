// The MPI Communicator: host-tensor collectives over an MPI communicator, and
// CUDA-tensor collectives over an NCCL communicator of the same ranks, created
// on first use. Includes <mpi.h>: include only from *_mpi.cpp files.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "bumblebee/distributed/communicator.h"

namespace bb::dist {

// Takes ownership of `comm` (freed with the Communicator) unless it is
// MPI_COMM_WORLD.
std::shared_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const std::string& name);

// Throws bb::Error naming the MPI call, the group and MPI's own message.
void check_mpi(int code, const char* call, const std::string& group);

}  // namespace bb::dist
