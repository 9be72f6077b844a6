// Reads /proc/self/status for host_memory() and resets VmHWM through clear_refs.
#include "bumblebee/core/host_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace bb {

HostMemory host_memory() {
  HostMemory m;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kb = 0;
    if (!(fields >> key >> kb)) continue;
    const uint64_t bytes = kb * 1024;   // the kernel prints these fields in kB
    if (key == "VmHWM:") m.peak_rss = bytes;
    else if (key == "VmRSS:") m.rss = bytes;
    else if (key == "RssAnon:") m.rss_anon = bytes;
    else if (key == "RssFile:" || key == "RssShmem:") m.rss_file += bytes;
  }
  return m;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

}  // namespace bb
