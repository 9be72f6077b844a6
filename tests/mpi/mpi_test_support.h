// Shared pieces of the tests under mpirun: the world communicator, the
// message of a bb::Error an action throws, whether every rank has a GPU
// (the NCCL cases skip otherwise, together on every rank), and scratch
// directories every rank of one launch shares.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

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

// `name` under /tmp/<prefix>_<mpirun's pid>: the same path on every rank of
// one launch, another for a concurrent launch.
inline std::string launch_scratch(const std::string& prefix, const std::string& name) {
  return "/tmp/" + prefix + "_" + std::to_string(::getppid()) + "/" + name;
}

// Removes what launch_scratch gave, and its parent once that is empty.
inline void remove_launch_scratch(const std::string& path) {
  std::filesystem::remove_all(path);
  std::error_code ec;  // not empty: another case of this launch still uses it
  std::filesystem::remove(std::filesystem::path(path).parent_path(), ec);
}

}  // namespace bb::test
