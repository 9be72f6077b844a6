// optimizer.offload_fraction through the runtime on the CPU backend: a
// fraction f of the optimizer state steps in host buffers with the same CPU
// AdamW, so f in {0, 0.5, 1} gives the same losses, weights and optimizer
// state bit for bit (float64 and float32); checkpoints written at one f load
// at another; the memory breakdown reports the host part on its own; a
// fraction outside [0, 1] is an error naming the key; Runtime::to's offload
// round trip moves the device part and leaves training unchanged. (dp = 2 with the
// distributed optimizer: tests/mpi/test_optimizer_offload_mpi.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/runtime/memory_breakdown.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/offload.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

struct OffloadRun {
  std::unique_ptr<Runtime> rt;
  ModelHandle h;
};

OffloadRun make_run(const std::string& dtype, double fraction, const std::string& device = "cpu") {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("llama3_gqa");
  cfg.backend_cfg.device = device;
  cfg.backend_cfg.dtype = dtype;
  cfg.backend_cfg.optimizer.lr = 1e-2;
  cfg.backend_cfg.optimizer.clip_grad = 0.5;   // clipping on: the host part must use the global norm
  cfg.backend_cfg.optimizer.no_weight_decay_1d = true;   // two groups, each with its own host prefix
  cfg.backend_cfg.optimizer.offload_fraction = fraction;
  OffloadRun r;
  r.rt = create_runtime(cfg);
  r.h = r.rt->build_model();
  return r;
}

std::vector<double> train_steps(OffloadRun& r, int steps) {
  const PackedBatch batch = test::fixture_batch("llama3_gqa");
  auto mode = r.rt->train_mode(r.h);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    r.rt->zero_grad(r.h);
    losses.push_back(r.rt->forward_backward(r.h, batch).loss);
    EXPECT_TRUE(r.rt->optimizer_step(r.h).update_successful);
    r.rt->lr_scheduler_step(r.h);
  }
  return losses;
}

// The weights, and the whole optimizer state of every group (host and device parts together).
std::vector<std::vector<double>> training_state(OffloadRun& r) {
  std::vector<std::vector<double>> out;
  for (Parameter& p : r.h.model().params().params()) out.push_back(p.value.to_doubles());
  DistributedOptimizer& opt = r.h.optimizer();
  for (DistributedOptimizer::GroupState& g : opt.groups())
    for (auto which : {DistributedOptimizer::State::Master, DistributedOptimizer::State::ExpAvg,
                       DistributedOptimizer::State::ExpAvgSq})
      out.push_back(opt.gather_state(g, which).to_doubles());
  return out;
}

int64_t host_numel(OffloadRun& r) {
  int64_t n = 0;
  for (const DistributedOptimizer::GroupState& g : r.h.optimizer().groups()) n += g.host.numel;
  return n;
}

TEST(OptimizerOffload, FractionsGiveBitIdenticalTraining) {
  for (const char* dtype : {"float64", "float32"}) {
    OffloadRun plain = make_run(dtype, 0.0);
    const std::vector<double> losses = train_steps(plain, 3);
    for (double f : {0.5, 1.0}) {
      OffloadRun hybrid = make_run(dtype, f);
      EXPECT_GT(host_numel(hybrid), 0) << f;
      EXPECT_EQ(train_steps(hybrid, 3), losses) << dtype << " f=" << f;
      EXPECT_EQ(training_state(hybrid), training_state(plain)) << dtype << " f=" << f;
    }
  }
}

TEST(OptimizerOffload, HalfKeepsAboutHalfOnTheHostAndOneKeepsNothingOnTheDevice) {
  OffloadRun half = make_run("float32", 0.5), all = make_run("float32", 1.0);
  int64_t shard = 0, on_device = 0;
  for (const DistributedOptimizer::GroupState& g : all.h.optimizer().groups()) {
    shard += g.reducer->shard_numel();
    on_device += g.exp_avg.numel();
  }
  EXPECT_EQ(host_numel(all), shard);
  EXPECT_EQ(on_device, 0);
  // Whole parameters: at least half, and less than half plus the largest parameter.
  EXPECT_GE(2 * host_numel(half), shard);
  int64_t largest = 0;
  for (const Parameter& p : half.h.model().params().params()) largest = std::max(largest, p.value.numel());
  EXPECT_LT(host_numel(half), shard / 2 + largest);
}

TEST(OptimizerOffload, MemoryBreakdownReportsTheHostPartSeparately) {
  OffloadRun all = make_run("float32", 1.0);
  train_steps(all, 1);
  const MemoryBreakdown m = memory_breakdown(all.h);
  EXPECT_EQ(m.moments, 0u);
  EXPECT_EQ(m.master, 0u);   // the device's master is the float32 parameters themselves
  EXPECT_EQ(m.host_moments, 2 * m.weights);
  EXPECT_EQ(m.host_master, m.weights);
  EXPECT_EQ(m.host_staging, m.grads);   // the gradients come down; float32 weights go up from the master
  EXPECT_TRUE(m.host_is_device);
  const nlohmann::json j = memory_breakdown_json(m, m.total() + m.host_total(), m.total() + m.host_total());
  EXPECT_EQ(j["other_static_gb"].get<double>(), 0.0);
  EXPECT_GT(j["host_moments_gb"].get<double>(), 0.0);
}

TEST(OptimizerOffload, CheckpointsLoadAcrossFractions) {
  const fs::path dir = fs::temp_directory_path() / ("bb_optoff_" + std::to_string(::getpid()));
  for (const char* dtype : {"float64", "float32"}) {
    OffloadRun plain = make_run(dtype, 0.0);
    train_steps(plain, 3);
    for (auto [save_f, load_f] : {std::pair{0.5, 0.0}, {0.0, 1.0}, {1.0, 0.5}}) {
      OffloadRun writer = make_run(dtype, save_f);
      train_steps(writer, 2);
      writer.rt->save_checkpoint(writer.h, dir.string());
      OffloadRun reader = make_run(dtype, load_f);
      EXPECT_EQ(reader.rt->load_checkpoint(reader.h, dir.string()), 2);
      train_steps(reader, 1);
      EXPECT_EQ(training_state(reader), training_state(plain)) << dtype << " " << save_f << " -> " << load_f;
    }
  }
  fs::remove_all(dir);
}

TEST(OptimizerOffload, RuntimeOffloadRoundTripKeepsTrainingBitIdentical) {
  OffloadRun plain = make_run("float32", 0.0), moved = make_run("float32", 0.5);
  train_steps(plain, 3);
  train_steps(moved, 1);
  const void* host_master = moved.h.optimizer().groups().front().host.master.raw();
  offload_to_host(moved.h.state(), OffloadParts{}, Device::cpu());
  reload_to_device(moved.h.state(), OffloadParts{}, Device::cpu());
  // The host part is not moved: it lives on the host already.
  EXPECT_EQ(moved.h.optimizer().groups().front().host.master.raw(), host_master);
  train_steps(moved, 2);
  EXPECT_EQ(training_state(moved), training_state(plain));
}

TEST(OptimizerOffload, AFractionOutsideZeroToOneIsAnErrorNamingTheKey) {
  for (double f : {-0.25, 1.5}) {
    try {
      make_run("float32", f);
      ADD_FAILURE() << "no error for offload_fraction " << f;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer.offload_fraction must lie in [0, 1]"), std::string::npos)
          << e.what();
    }
  }
}

// On a GPU the host part runs the CPU op and the rest the CUDA kernel, whose
// float32 arithmetic differs in rounding: equal within float32 rounding, not
// bit for bit, so a bf16 weight may round to its neighbour. Run by the
// gpu_unit stage; skipped without a GPU.
// The device kernel multiplies by 1/sqrt(1 - beta2^t) where the host op
// divides by sqrt(1 - beta2^t), so the first step's masters differ by fp32
// rounding and its bf16 weights by at most one bf16 ulp. Later steps are not
// compared element by element: Adam's update m / sqrt(v) has the sign of
// gradients near zero, which the bf16 weights' last bits (and two CUDA runs'
// atomics) can flip, moving such an element by 2 lr; the losses and each
// tensor's overall difference must stay small.
TEST(OptimizerOffloadCuda, HybridStepsMatchTheDeviceStepToRounding) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  auto weights_of = [](OffloadRun& r) {
    std::vector<std::vector<double>> out;
    for (Parameter& p : r.h.model().params().params()) out.push_back(p.value.to_doubles());
    return out;
  };
  OffloadRun plain1 = make_run("bfloat16", 0.0, "cuda");
  train_steps(plain1, 1);
  const auto one_step = weights_of(plain1);
  OffloadRun plain = make_run("bfloat16", 0.0, "cuda");
  const std::vector<double> losses = train_steps(plain, 3);
  const auto three_steps = weights_of(plain);
  for (double f : {0.5, 1.0}) {
    OffloadRun hybrid1 = make_run("bfloat16", f, "cuda");
    EXPECT_TRUE(hybrid1.h.optimizer().groups().front().host.master.storage()->pinned_host());
    train_steps(hybrid1, 1);
    const auto got1 = weights_of(hybrid1);
    for (size_t t = 0; t < got1.size(); ++t)
      for (size_t k = 0; k < got1[t].size(); ++k)
        ASSERT_LE(std::abs(got1[t][k] - one_step[t][k]), std::ldexp(std::abs(one_step[t][k]), -7) + 1e-9)
            << "tensor " << t << " element " << k << " f=" << f;
    OffloadRun hybrid = make_run("bfloat16", f, "cuda");
    const std::vector<double> got = train_steps(hybrid, 3);
    for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(got[i], losses[i], 1e-3 * std::abs(losses[i])) << f;
    const auto got3 = weights_of(hybrid);
    for (size_t t = 0; t < got3.size(); ++t) {
      double diff = 0, norm = 0;
      for (size_t k = 0; k < got3[t].size(); ++k) {
        diff += (got3[t][k] - three_steps[t][k]) * (got3[t][k] - three_steps[t][k]);
        norm += three_steps[t][k] * three_steps[t][k];
      }
      EXPECT_LT(std::sqrt(diff), 5e-2 * std::sqrt(norm)) << "tensor " << t << " f=" << f;
    }
  }
}

}  // namespace
}  // namespace bb
