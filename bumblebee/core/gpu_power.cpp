// GpuPowerMonitor: NVML's entry points looked up once with dlopen, a sampling
// thread, and the arithmetic of a report.
#include "bumblebee/core/gpu_power.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/error.h"

namespace bb {
namespace {

// The few NVML calls used here, with NVML's C types spelled out (nvml.h is
// not part of the CUDA toolkit): nvmlReturn_t is an int enum whose success is
// 0, nvmlDevice_t an opaque pointer, nvmlClockType_t an int enum.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr int kNvmlClockSm = 1;
constexpr unsigned long long kSwPowerCap = 0x4;   // nvmlClocksEventReasonSwPowerCap

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*device_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power_mw)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*power_limit_mw)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*energy_mj)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*clock_event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
  bool ready = false;
};

// Loaded and initialised once for the process and never shut down: NVML's
// init is cheap to keep and its shutdown would race monitors of other threads.
const Nvml& nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return n;
    const auto find = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    };
    find(n.init, "nvmlInit_v2");
    find(n.device_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    find(n.clock, "nvmlDeviceGetClockInfo");
    find(n.max_clock, "nvmlDeviceGetMaxClockInfo");
    find(n.power_mw, "nvmlDeviceGetPowerUsage");
    find(n.power_limit_mw, "nvmlDeviceGetEnforcedPowerLimit");
    find(n.energy_mj, "nvmlDeviceGetTotalEnergyConsumption");
    find(n.clock_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!n.clock_event_reasons) find(n.clock_event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    n.ready = n.init && n.device_by_pci_bus_id && n.clock && n.power_mw && n.init() == 0;
    return n;
  }();
  return loaded;
}

}  // namespace

GpuPowerReport summarize_gpu_power(const std::vector<GpuPowerSample>& samples, double seconds, double energy_j,
                                   double power_limit_w, double boost_sm_clock_mhz) {
  GpuPowerReport r;
  if (samples.empty()) return r;
  r.measured = true;
  r.samples = int(samples.size());
  r.seconds = seconds;
  r.power_limit_w = power_limit_w;
  r.boost_sm_clock_mhz = boost_sm_clock_mhz;
  r.min_sm_clock_mhz = r.max_sm_clock_mhz = samples.front().sm_clock_mhz;
  double clock_sum = 0, power_sum = 0;
  int capped = 0;
  for (const GpuPowerSample& s : samples) {
    clock_sum += s.sm_clock_mhz;
    power_sum += s.power_w;
    r.min_sm_clock_mhz = std::min(r.min_sm_clock_mhz, s.sm_clock_mhz);
    r.max_sm_clock_mhz = std::max(r.max_sm_clock_mhz, s.sm_clock_mhz);
    capped += s.power_capped ? 1 : 0;
  }
  const double n = double(samples.size());
  r.mean_sm_clock_mhz = clock_sum / n;
  r.power_capped_share = double(capped) / n;
  r.energy_j = energy_j >= 0 ? energy_j : power_sum / n * seconds;
  r.mean_power_w = seconds > 0 ? r.energy_j / seconds : power_sum / n;
  return r;
}

struct GpuPowerMonitor::Impl {
  NvmlDevice device = nullptr;
  std::chrono::milliseconds period;
  double power_limit_w = 0, boost_mhz = 0;

  std::thread sampler;
  std::mutex mutex;
  std::condition_variable wake;
  bool running = false;
  std::vector<GpuPowerSample> samples;
  std::chrono::steady_clock::time_point started;
  unsigned long long energy_start_mj = 0;
  bool energy_counted = false;

  GpuPowerSample read() const {
    const Nvml& n = nvml();
    GpuPowerSample s;
    unsigned mhz = 0, mw = 0;
    unsigned long long reasons = 0;
    if (n.clock(device, kNvmlClockSm, &mhz) == 0) s.sm_clock_mhz = mhz;
    if (n.power_mw(device, &mw) == 0) s.power_w = mw * 1e-3;
    if (n.clock_event_reasons && n.clock_event_reasons(device, &reasons) == 0)
      s.power_capped = (reasons & kSwPowerCap) != 0;
    return s;
  }

  void sample_until_stopped() {
    std::unique_lock<std::mutex> lock(mutex);
    while (running) {
      lock.unlock();
      const GpuPowerSample s = read();
      lock.lock();
      samples.push_back(s);
      wake.wait_for(lock, period, [this] { return !running; });
    }
  }
};

GpuPowerMonitor::GpuPowerMonitor(Device dev, int period_ms) : impl_(std::make_unique<Impl>()) {
  BB_CHECK(period_ms > 0, "GpuPowerMonitor: period_ms must be positive, got ", period_ms);
  impl_->period = std::chrono::milliseconds(period_ms);
  const Nvml& n = nvml();
  if (dev.is_cpu() || !n.ready) return;
  const std::string bus_id = device_pci_bus_id(dev);
  if (n.device_by_pci_bus_id(bus_id.c_str(), &impl_->device) != 0) {
    impl_->device = nullptr;
    return;
  }
  unsigned value = 0;
  if (n.power_limit_mw && n.power_limit_mw(impl_->device, &value) == 0) impl_->power_limit_w = value * 1e-3;
  if (n.max_clock && n.max_clock(impl_->device, kNvmlClockSm, &value) == 0) impl_->boost_mhz = value;
}

GpuPowerMonitor::~GpuPowerMonitor() {
  if (impl_->sampler.joinable()) stop();
}

bool GpuPowerMonitor::available() const { return impl_->device != nullptr; }

void GpuPowerMonitor::start() {
  if (!available()) return;
  BB_CHECK(!impl_->sampler.joinable(), "GpuPowerMonitor::start: already started");
  const Nvml& n = nvml();
  impl_->samples.clear();
  impl_->energy_counted = n.energy_mj && n.energy_mj(impl_->device, &impl_->energy_start_mj) == 0;
  impl_->started = std::chrono::steady_clock::now();
  impl_->running = true;
  impl_->sampler = std::thread([this] { impl_->sample_until_stopped(); });
}

GpuPowerReport GpuPowerMonitor::stop() {
  if (!impl_->sampler.joinable()) return {};
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->running = false;
  }
  impl_->wake.notify_all();
  impl_->sampler.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - impl_->started).count();
  unsigned long long energy_end_mj = 0;
  double energy_j = -1;
  if (impl_->energy_counted && nvml().energy_mj(impl_->device, &energy_end_mj) == 0)
    energy_j = double(energy_end_mj - impl_->energy_start_mj) * 1e-3;
  return summarize_gpu_power(impl_->samples, seconds, energy_j, impl_->power_limit_w, impl_->boost_mhz);
}

}  // namespace bb
