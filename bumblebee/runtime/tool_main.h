// Entry point shared by the command-line tools: runs the tool, turns any error
// into one line on stderr and exit code 1, and under a multi-rank launch ends
// every rank so that none is left waiting in a collective.
#pragma once

#include <functional>

namespace bb {
int run_tool(int argc, char** argv, const std::function<int(int, char**)>& body);
}
