// MPI bootstrap for World: init, finalise, node-local rank, world splits.
#include <mpi.h>

#include "bumblebee/core/error.h"
#include "bumblebee/distributed/communicator_mpi.h"
#include "bumblebee/distributed/mpi_bootstrap.h"

namespace bb::dist::mpi {

namespace {
bool g_we_initialised = false;
}  // namespace

Started start() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread", "world");
    g_we_initialised = true;
    BB_CHECK(provided >= MPI_THREAD_SERIALIZED, "the MPI library provides thread level ", provided,
             ", below MPI_THREAD_SERIALIZED which Bumblebee needs");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Started s;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &s.rank), "MPI_Comm_rank", "world");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &s.size), "MPI_Comm_size", "world");
  return s;
}

void stop() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (g_we_initialised && !finalised) MPI_Finalize();
}

int node_local_rank() {
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type", "world");
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

std::shared_ptr<Communicator> world_communicator() { return make_mpi_communicator(MPI_COMM_WORLD, "world"); }

std::shared_ptr<Communicator> split_world(int color, int key, const std::string& name) {
  MPI_Comm comm;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split", name);
  return make_mpi_communicator(comm, name);
}

void abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();
}

}  // namespace bb::dist::mpi
