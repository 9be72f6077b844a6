// Out-of-line part of the error machinery: formats the message with its origin.
#include "bumblebee/core/error.h"

#include <cstring>

namespace bb::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(msg + " [" + base + ":" + std::to_string(line) + "]");
}

}  // namespace bb::detail
