// A GPU's SM clock, board power and energy over a span of work, read through
// NVML, the driver's management library. Training on an H200 runs at its
// 700 W power cap, where the SM clock falls from 1980 MHz to 1500-1700 and
// every kernel with it (benchmarks/RESULTS.md, nineteenth session): a
// throughput figure needs the clock it ran at, and a change that saves
// energy can speed up the kernels it does not touch.
//
// NVML is opened at run time (libnvidia-ml.so.1 comes with the driver, not
// the toolkit), so a host without a driver, a CPU-only build and a CPU device
// run as before, with reports that say they measured nothing.
#pragma once

#include <memory>
#include <vector>

#include "bumblebee/core/device.h"

namespace bb {

// One reading of the device.
struct GpuPowerSample {
  double sm_clock_mhz = 0, power_w = 0;
  bool power_capped = false;   // the clock event reasons include the software power cap
};

// What a span adds up to. Energy comes from the device's counter (end minus
// start); where the device has none, from the samples' mean power.
struct GpuPowerReport {
  bool measured = false;       // false: no NVML, a host device, or no sample
  int samples = 0;
  double seconds = 0, energy_j = 0, mean_power_w = 0, power_limit_w = 0;
  double mean_sm_clock_mhz = 0, min_sm_clock_mhz = 0, max_sm_clock_mhz = 0;
  double boost_sm_clock_mhz = 0;    // the most this device's SM clock may run at
  double power_capped_share = 0;    // of the samples
};

// The report of `samples` over `seconds`; `energy_j` < 0 when the device
// has no energy counter.
GpuPowerReport summarize_gpu_power(const std::vector<GpuPowerSample>& samples, double seconds, double energy_j,
                                   double power_limit_w, double boost_sm_clock_mhz);

// Samples one device every `period_ms` on a thread of its own between
// start() and stop().
class GpuPowerMonitor {
 public:
  explicit GpuPowerMonitor(Device dev, int period_ms = 50);
  ~GpuPowerMonitor();
  GpuPowerMonitor(const GpuPowerMonitor&) = delete;
  GpuPowerMonitor& operator=(const GpuPowerMonitor&) = delete;

  bool available() const;   // NVML opened and the device found in it
  void start();
  GpuPowerReport stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bb
