// The message an op's argument check throws, for tests that assert what a
// bad call's error names.
#pragma once

#include <functional>
#include <string>

#include "bumblebee/core/error.h"

namespace bb::test {

// The message of the Error `call` throws (empty when it throws none).
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace bb::test
