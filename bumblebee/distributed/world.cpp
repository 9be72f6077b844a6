// World bootstrap: launcher detection, then MPI or a single-process world.
#include "bumblebee/distributed/world.h"

#include <cstdlib>

#include "bumblebee/core/error.h"
#include "bumblebee/distributed/mpi_bootstrap.h"

namespace bb::dist {

namespace {

#ifdef BB_WITH_MPI
constexpr bool kMpiBuilt = true;
#else
constexpr bool kMpiBuilt = false;
#endif

}  // namespace

World& World::instance() {
  static World world;
  return world;
}

World::World() : launch_(detect_launch()) {
  check_launch_supported(launch_, kMpiBuilt);
#ifdef BB_WITH_MPI
  if (launch_.mpi) {
    mpi::Started s = mpi::start();
    uses_mpi_ = true;
    BB_CHECK(launch_.size == 0 || launch_.size == s.size, launch_.launcher, " started ", launch_.size,
             " ranks but MPI sees a world of ", s.size, "; the launcher and the MPI library do not match (with srun, "
             "pass --mpi=pmix)");
    rank_ = s.rank;
    size_ = s.size;
    local_rank_ = launch_.local_rank >= 0 ? launch_.local_rank : mpi::node_local_rank();
    comm_ = mpi::world_communicator();
    return;
  }
#endif
  comm_ = make_single_rank_communicator("world");
}

World::~World() {
  comm_.reset();
#ifdef BB_WITH_MPI
  if (uses_mpi_) mpi::stop();
#endif
}

std::shared_ptr<Communicator> World::split(int color, int key, const std::string& name) {
  BB_CHECK(color >= 0, "World::split for group ", name, ": color must be >= 0, got ", color);
#ifdef BB_WITH_MPI
  if (uses_mpi_) return mpi::split_world(color, key, name);
#endif
  return make_single_rank_communicator(name);
}

void World::abort(int exit_code) {
#ifdef BB_WITH_MPI
  if (uses_mpi_) mpi::abort(exit_code);
#endif
  std::_Exit(exit_code);
}

}  // namespace bb::dist
