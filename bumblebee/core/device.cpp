// Device names.
#include "bumblebee/core/device.h"

#include "bumblebee/core/error.h"

namespace bb {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda" || s == "gpu") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return cuda(std::stoi(s.substr(5)));
    } catch (const std::exception&) {
    }
  }
  BB_FAIL("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

}  // namespace bb
