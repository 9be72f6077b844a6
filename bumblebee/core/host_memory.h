// This process's host memory as Linux counts it (/proc/self/status): the
// resident set now, split into anonymous pages (heap, tensors) and
// file-backed pages (mapped files such as safetensors shards, which are
// clean page cache the kernel may drop), and its high-water mark.
#pragma once

#include <cstdint>

namespace bb {

struct HostMemory {
  uint64_t peak_rss = 0;   // VmHWM: the most resident bytes since start or reset_peak_rss()
  uint64_t rss = 0;        // VmRSS
  uint64_t rss_anon = 0;   // RssAnon
  uint64_t rss_file = 0;   // RssFile (plus RssShmem: shared memory the process maps)
};

// All zero where /proc/self/status is missing (not Linux).
HostMemory host_memory();

// Resets peak_rss to the current rss (writes 5 to /proc/self/clear_refs,
// Linux >= 4.0); false when the kernel does not allow it.
bool reset_peak_rss();

}  // namespace bb
