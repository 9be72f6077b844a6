// Running the built command-line tools from tests: output, exit code, and the
// JSON object a tool prints on its own line.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/tools/scratch_dir.h"

namespace bb::test {

struct ToolResult {
  int code = -1;
  std::string out;   // stdout and stderr together
};

// With timeout_s > 0 the command is killed after that many seconds (coreutils
// `timeout`; exit code 124), so a test of an input that hangs fails instead of hanging.
inline ToolResult run_command(const std::string& cmd, int timeout_s = 0) {
  ToolResult r;
  std::string bounded = cmd;
  if (timeout_s > 0) {
    std::string quoted;   // cmd as one single-quoted shell word
    for (char c : cmd) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    bounded = "timeout --kill-after=10 " + std::to_string(timeout_s) + " bash -c '" + quoted + "'";
  }
  FILE* p = popen((bounded + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The last line that starts with '{' (MPI may print around it).
inline nlohmann::json last_json_line(const std::string& out) {
  size_t start = out.rfind("\n{");
  start = start == std::string::npos ? 0 : start + 1;
  const size_t end = out.find('\n', start);
  return nlohmann::json::parse(out.substr(start, end == std::string::npos ? std::string::npos : end - start));
}

// A file's bytes ("" when it does not exist).
inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline std::string tool(const std::string& name) { return std::string(BB_BINARY_DIR) + "/bin/" + name; }

// Each launch gets a session directory of its own: Open MPI 4 creates
// /tmp/ompi.<host>.<uid> without tolerating a concurrent mpirun doing the same
// ("mkdir ... File exists"), which ctest -j runs hit.
inline std::string mpirun(int ranks) {
  static int launches = 0;
  const std::string session = (process_scratch_dir() / ("ompi_" + std::to_string(launches++))).string();
  std::filesystem::create_directories(session);
  return "mpirun --allow-run-as-root --oversubscribe --mca orte_tmpdir_base " + session + " -np " +
         std::to_string(ranks) + " ";
}

}  // namespace bb::test
