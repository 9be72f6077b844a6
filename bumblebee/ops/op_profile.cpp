// Op-level time accounting (op_profile.h): one record per timed call, with
// CUDA event slots or host clock readings, summed by name in take().
#include "bumblebee/ops/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>

#ifdef BB_WITH_CUDA
#include "bumblebee/ops/cuda/event_timing.h"
#endif

namespace bb::ops::profile {
namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  std::string name;
  Device device;
  int start_event = -1, end_event = -1;   // CUDA
  Clock::time_point start_time;           // host
  double host_ms = -1;
};

bool g_enabled = false;
std::vector<Record> g_records;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string group_of(const std::string& op) {
  if (starts_with(op, "matmul")) return "gemm";
  if (starts_with(op, "grouped_gemm")) return "grouped gemm";   // the MoE experts
  if (starts_with(op, "moe_router")) return "router";
  if (starts_with(op, "moe_")) return "moe dispatch";           // permute, unpermute, sort, row weights
  if (starts_with(op, "attention")) return "attention";
  if (starts_with(op, "nccl ")) return "communication";
  if (starts_with(op, "rmsnorm")) return "norm";                // also rmsnorm_rope_*: q/k norms with their RoPE
  if (starts_with(op, "add_rmsnorm")) return "norm";            // the residual add with the norm after it
  if (starts_with(op, "logits_") || starts_with(op, "cross_entropy") || starts_with(op, "entropy")) return "cross entropy";
  if (starts_with(op, "embedding")) return "embedding";
  if (starts_with(op, "adamw_step") || starts_with(op, "sum_squares") || op == "count_zeros" || op == "all_finite" ||
      op == "sum")
    return "optimizer";
  return "elementwise";   // swiglu, rope, add, add_, mul, scale_
}

// 2 M N K of a "matmul MxNxK .." label, else 0.
double gemm_flops(const std::string& op) {
  long long m = 0, n = 0, k = 0;
  if (std::sscanf(op.c_str(), "matmul %lldx%lldx%lld", &m, &n, &k) != 3) return 0;
  return 2.0 * double(m) * double(n) * double(k);
}

}  // namespace

void set_enabled(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }

Scope::Scope(Device device, const std::string& name) {
  if (!g_enabled) return;
  Record r;
  r.name = name;
  r.device = device;
  if (device.is_cuda()) {
#ifdef BB_WITH_CUDA
    r.start_event = cuda::record_timing_event(device.index);
#else
    return;
#endif
  } else {
    r.start_time = Clock::now();
  }
  g_records.push_back(std::move(r));
  record_ = int64_t(g_records.size()) - 1;
}

Scope::~Scope() {
  if (record_ < 0) return;
  Record& r = g_records[size_t(record_)];
  if (r.device.is_cpu()) {
    r.host_ms = std::chrono::duration<double, std::milli>(Clock::now() - r.start_time).count();
    return;
  }
#ifdef BB_WITH_CUDA
  // A destructor must not throw; when CUDA fails here the op's own error is
  // already on its way, and the record stays without an end (take() skips it).
  try {
    r.end_event = cuda::record_timing_event(r.device.index);
  } catch (const std::exception&) {
  }
#endif
}

std::vector<OpTime> take() {
  std::map<std::string, OpTime> by_name;
  for (const Record& r : g_records) {
    double ms = r.host_ms;
#ifdef BB_WITH_CUDA
    if (r.device.is_cuda() && r.end_event >= 0) ms = cuda::timing_elapsed_ms(r.start_event, r.end_event);
#endif
    if (ms < 0) continue;
    OpTime& t = by_name[r.name];
    t.name = r.name;
    t.calls += 1;
    t.ms += ms;
    t.group = group_of(r.name);
    t.communication = t.group == "communication";
    t.flops += gemm_flops(r.name);
  }
#ifdef BB_WITH_CUDA
  cuda::release_timing_events();
#endif
  g_records.clear();
  std::vector<OpTime> out;
  for (auto& [name, t] : by_name) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace bb::ops::profile
