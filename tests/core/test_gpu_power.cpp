// GpuPowerMonitor: the report's arithmetic on made-up samples, a host device
// that measures nothing, and (on a machine with a GPU and its driver) a
// measured span of GEMMs.
#include <gtest/gtest.h>

#include <chrono>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/gpu_power.h"
#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb {
namespace {

TEST(GpuPower, ReportAveragesTheSamplesAndTakesEnergyFromTheCounter) {
  const std::vector<GpuPowerSample> samples = {{1980, 300, false}, {1500, 700, true}, {1620, 690, true}};
  const GpuPowerReport r = summarize_gpu_power(samples, 2.0, 1200.0, 700.0, 1980.0);
  ASSERT_TRUE(r.measured);
  EXPECT_EQ(r.samples, 3);
  EXPECT_DOUBLE_EQ(r.mean_sm_clock_mhz, (1980.0 + 1500.0 + 1620.0) / 3);
  EXPECT_DOUBLE_EQ(r.min_sm_clock_mhz, 1500.0);
  EXPECT_DOUBLE_EQ(r.max_sm_clock_mhz, 1980.0);
  EXPECT_DOUBLE_EQ(r.power_capped_share, 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.energy_j, 1200.0);
  EXPECT_DOUBLE_EQ(r.mean_power_w, 600.0);   // the counter's energy over the span, not the samples' mean
  EXPECT_DOUBLE_EQ(r.power_limit_w, 700.0);
  EXPECT_DOUBLE_EQ(r.boost_sm_clock_mhz, 1980.0);
}

TEST(GpuPower, WithoutAnEnergyCounterTheSamplesGiveTheEnergy) {
  const GpuPowerReport r = summarize_gpu_power({{1800, 400, false}, {1700, 600, false}}, 3.0, -1.0, 700.0, 1980.0);
  EXPECT_DOUBLE_EQ(r.energy_j, 1500.0);
  EXPECT_DOUBLE_EQ(r.mean_power_w, 500.0);
  EXPECT_DOUBLE_EQ(r.power_capped_share, 0.0);
}

TEST(GpuPower, NoSamplesIsNoMeasurement) {
  const GpuPowerReport r = summarize_gpu_power({}, 1.0, 50.0, 700.0, 1980.0);
  EXPECT_FALSE(r.measured);
  EXPECT_EQ(r.samples, 0);
}

TEST(GpuPower, AHostDeviceMeasuresNothing) {
  GpuPowerMonitor monitor(Device::cpu());
  EXPECT_FALSE(monitor.available());
  monitor.start();
  EXPECT_FALSE(monitor.stop().measured);
}

TEST(GpuPower, MeasuresACudaDeviceUnderLoad) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const Device gpu = Device::cuda(0);
  GpuPowerMonitor monitor(gpu, 10);
  if (!monitor.available()) GTEST_SKIP() << "no NVML (libnvidia-ml.so.1) for this GPU";
  const Tensor a = Tensor::zeros({4096, 4096}, DType::BF16, gpu);
  Tensor c = Tensor::empty({4096, 4096}, DType::BF16, gpu);
  monitor.start();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 20; ++i) ops::matmul(a, false, a, false, c);
    device_synchronize(gpu);
  }
  const GpuPowerReport r = monitor.stop();
  ASSERT_TRUE(r.measured);
  EXPECT_GE(r.samples, 5);
  EXPECT_GT(r.seconds, 0.25);
  EXPECT_GT(r.energy_j, 0.0);
  EXPECT_GT(r.mean_power_w, 0.0);
  EXPECT_GT(r.min_sm_clock_mhz, 0.0);
  EXPECT_LE(r.max_sm_clock_mhz, r.boost_sm_clock_mhz);
  EXPECT_GT(r.power_limit_w, 0.0);
}

}  // namespace
}  // namespace bb
