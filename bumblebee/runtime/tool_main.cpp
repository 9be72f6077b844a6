// run_tool: error reporting for the command-line tools.
#include "bumblebee/runtime/tool_main.h"

#include <cstdio>
#include <exception>

#include "bumblebee/distributed/world.h"

namespace bb {

int run_tool(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    dist::World& world = dist::World::instance();
    if (world.size() > 1) world.abort(1);
    return 1;
  }
}

}  // namespace bb
