// Op-level time accounting (op_profile.h): a list of (name, start, end) event
// slots, summed by name in take().
#include "bumblebee/ops/op_profile.h"

#include <algorithm>
#include <exception>
#include <map>

#ifdef BB_WITH_CUDA
#include "bumblebee/ops/cuda/event_timing.h"
#endif

namespace bb::ops::profile {
namespace {

struct Record {
  std::string name;
  int device = 0;
  int start = -1, end = -1;
};

bool g_enabled = false;
std::vector<Record> g_records;

}  // namespace

void set_enabled(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }

Scope::Scope([[maybe_unused]] Device device, [[maybe_unused]] const std::string& name) {
#ifdef BB_WITH_CUDA
  if (!g_enabled || !device.is_cuda()) return;
  g_records.push_back({name, device.index, cuda::record_timing_event(device.index), -1});
  record_ = int64_t(g_records.size()) - 1;
#endif
}

Scope::~Scope() {
#ifdef BB_WITH_CUDA
  if (record_ < 0) return;
  // A destructor must not throw; when CUDA fails here the op's own error is
  // already on its way, and the record stays without an end (take() skips it).
  try {
    Record& r = g_records[size_t(record_)];
    r.end = cuda::record_timing_event(r.device);
  } catch (const std::exception&) {
  }
#endif
}

std::vector<OpTime> take() {
  std::map<std::string, OpTime> by_name;
#ifdef BB_WITH_CUDA
  for (const Record& r : g_records) {
    if (r.end < 0) continue;
    OpTime& t = by_name[r.name];
    t.name = r.name;
    t.calls += 1;
    t.ms += cuda::timing_elapsed_ms(r.start, r.end);
    t.communication = r.name.rfind("nccl ", 0) == 0;
  }
  cuda::release_timing_events();
#endif
  g_records.clear();
  std::vector<OpTime> out;
  for (auto& [name, t] : by_name) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace bb::ops::profile
