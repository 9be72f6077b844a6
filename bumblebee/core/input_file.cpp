// Checked opening of user-given input files: one message per way a path can be wrong.
#include "bumblebee/core/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "bumblebee/core/error.h"

namespace bb {

void check_input_file(const std::string& path, const std::string& what) {
  BB_CHECK(!path.empty(), what, ": no path given");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    BB_CHECK(err != ENOENT, what, " ", path, " does not exist");
    BB_FAIL(what, " ", path, " cannot be read: ", std::strerror(err));
  }
  BB_CHECK(!S_ISDIR(st.st_mode), what, " ", path, " is a directory, not a file");
  // A FIFO or device could block a reader forever or never end: only plain files are inputs.
  BB_CHECK(S_ISREG(st.st_mode), what, " ", path, " is not a regular file");
  BB_CHECK(::access(path.c_str(), R_OK) == 0, what, " ", path, " cannot be read: ", std::strerror(errno));
}

std::ifstream open_input_file(const std::string& path, const std::string& what, std::ios::openmode mode) {
  check_input_file(path, what);
  std::ifstream in(path, mode | std::ios::in);
  BB_CHECK(in.is_open(), what, " ", path, " cannot be opened: ", std::strerror(errno));
  return in;
}

std::string read_input_file(const std::string& path, const std::string& what) {
  std::ifstream in = open_input_file(path, what, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  BB_CHECK(!in.bad(), what, " ", path, ": read error");
  return bytes.str();
}

}  // namespace bb
