// Errors: bb::Error and the BB_CHECK macro.
//
// Every failure a user can cause (bad config, corrupt checkpoint, wrong sizes)
// is reported by throwing bb::Error with a message that names the cause; tools
// catch it at main() and print one line. The source location is appended so a
// developer can find the check that fired.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace bb {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace bb

// BB_CHECK(cond, parts...): throw bb::Error("parts..." + location) unless cond.
#define BB_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) ::bb::detail::throw_error(__FILE__, __LINE__,               \
                                           ::bb::detail::concat(__VA_ARGS__)); \
  } while (0)

// BB_FAIL(parts...): unconditional error.
#define BB_FAIL(...) ::bb::detail::throw_error(__FILE__, __LINE__, ::bb::detail::concat(__VA_ARGS__))
