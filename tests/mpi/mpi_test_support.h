// Shared pieces of the tests under mpirun: the world communicator, the
// message of a bb::Error an action throws, and whether every rank has a GPU
// (the NCCL cases skip otherwise, together on every rank).
#pragma once

#include <functional>
#include <string>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/error.h"
#include "bumblebee/distributed/world.h"

namespace bb::test {

inline dist::Communicator& world_comm() { return dist::World::instance().comm(); }

// The message of the bb::Error `f` throws; empty when it throws none.
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool every_rank_has_a_gpu() {
  dist::World& w = dist::World::instance();
  const bool mine = cuda_device_count() > w.local_rank();
  return w.comm().all_reduce_scalar(mine ? 1.0 : 0.0) == double(w.size());
}

}  // namespace bb::test
