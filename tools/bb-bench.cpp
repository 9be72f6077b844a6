// bb-bench: training-step throughput with the seed library's key=value syntax.
//
//   bb-bench backend=bb hf_path=DIR [backend.model_name=auto] [backend.impl=lite]
//       [backend.parallel.tp=N ...] [backend.device=cuda] [backend.recompute=none|selective|full]
//       [backend.recompute_modules=core_attn,mlp] [backend.recompute_num_layers=N]
//       [optimizer.lr=X ...] [bench.seq_len=4096] [bench.num_microbatches=1]
//       [bench.micro_batch_size=1] [bench.steps=10] [bench.warmup=2] [bench.truncate_layers=L]
//       [bench.profile_steps=0] [bench.offload=false] [plugin=LIB.so,...] [output_json=FILE]
//   bb-bench help     (every key with its type, default and meaning)
//
// Each step is zero_grad -> forward_backward -> optimizer_step ->
// lr_scheduler_step on random tokens (fixed seed), timed from host to host
// with the device drained. Per step it prints loss, grad_norm, step_ms,
// tokens/s, TFLOP/s per GPU, MFU and peak memory; at the end the memory by
// category (runtime/memory_breakdown.h) and one JSON summary line (also
// written to output_json).
//
// bench.profile_steps=N runs N more steps after the timed ones with op
// profiling on (ops/op_profile.h) and prints where a step's device time goes:
// per op (GEMMs by shape), per step, with its share of the step and the time
// in NCCL collectives. The timed steps run without it, so profiling does not
// change the throughput figures.
//
// bench.offload=true then moves the model's state to pinned host memory and
// back (Runtime::to), timing both directions and reading the driver's free
// device memory (cudaMemGetInfo) before and after, and takes one more step:
// the summary's "offload" object.
//
// On a GPU whose driver has NVML, the timed steps are also sampled for the SM
// clock, board power and energy (core/gpu_power.h): one more printed line
// and the summary's "gpu_power" object (rank 0's GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/gpu_power.h"
#include "bumblebee/core/rng.h"
#include "bumblebee/ops/op_profile.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/memory_breakdown.h"
#include "bumblebee/runtime/runtime.h"
#include "bumblebee/runtime/tool_main.h"

using namespace bb;

namespace {

constexpr double kPeakBf16Flops = 989e12;   // H100/H200 dense bf16

bool has_weights(const std::string& dir) {
  return std::filesystem::exists(dir + "/model.safetensors") ||
         std::filesystem::exists(dir + "/model.safetensors.index.json");
}

// The timed steps' clock, power and energy on this rank's GPU; `tokens` are
// the rank's tokens a step.
nlohmann::json gpu_power_json(const GpuPowerReport& r, int64_t steps, double tokens) {
  const double joules_per_step = r.energy_j / double(steps);
  return {{"samples", r.samples},
          {"mean_sm_clock_mhz", r.mean_sm_clock_mhz},
          {"min_sm_clock_mhz", r.min_sm_clock_mhz},
          {"max_sm_clock_mhz", r.max_sm_clock_mhz},
          {"boost_sm_clock_mhz", r.boost_sm_clock_mhz},
          {"mean_power_w", r.mean_power_w},
          {"power_limit_w", r.power_limit_w},
          {"power_capped_share", r.power_capped_share},
          {"joules_per_step", joules_per_step},
          {"tokens_per_joule", tokens / joules_per_step}};
}

void print_gpu_power(const nlohmann::json& p) {
  std::printf("gpu over the timed steps: sm clock %.0f MHz (%.0f-%.0f, boost %.0f), power %.0f W of %.0f "
              "(power-capped in %.0f%% of %d samples), %.1f J a step, %.1f tokens/J\n",
              p["mean_sm_clock_mhz"].get<double>(), p["min_sm_clock_mhz"].get<double>(),
              p["max_sm_clock_mhz"].get<double>(), p["boost_sm_clock_mhz"].get<double>(),
              p["mean_power_w"].get<double>(), p["power_limit_w"].get<double>(),
              100 * p["power_capped_share"].get<double>(), p["samples"].get<int>(),
              p["joules_per_step"].get<double>(), p["tokens_per_joule"].get<double>());
}

// Runs `steps` more steps with op profiling on; prints the per-step table on
// the root rank and returns it as JSON.
template <class Step>
nlohmann::json profile(Step& timed_step, int64_t steps, bool root) {
  ops::profile::take();
  ops::profile::set_enabled(true);
  double step_ms = 0;
  for (int64_t i = 0; i < steps; ++i) step_ms += timed_step();
  ops::profile::set_enabled(false);
  const std::vector<ops::profile::OpTime> ops_time = ops::profile::take();
  step_ms /= double(steps);
  double compute_ms = 0, comm_ms = 0;
  nlohmann::json table = nlohmann::json::array();
  std::map<std::string, std::pair<double, double>> groups;   // group -> (ms, flops) per step
  for (const auto& t : ops_time) {
    const double ms = t.ms / double(steps);
    (t.communication ? comm_ms : compute_ms) += ms;
    groups[t.group].first += ms;
    groups[t.group].second += t.flops / double(steps);
    table.push_back({{"op", t.name}, {"group", t.group}, {"calls_per_step", double(t.calls) / double(steps)},
                     {"ms_per_step", ms}, {"share_of_step", ms / step_ms}});
  }
  std::vector<std::pair<std::string, std::pair<double, double>>> by_time(groups.begin(), groups.end());
  std::sort(by_time.begin(), by_time.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  nlohmann::json group_table = nlohmann::json::array();
  for (const auto& [group, g] : by_time) {
    nlohmann::json row = {{"group", group}, {"ms_per_step", g.first}, {"share_of_step", g.first / step_ms}};
    if (g.second > 0) row["tflops"] = g.second / (g.first * 1e-3) / 1e12;
    group_table.push_back(row);
  }
  if (root) {
    std::printf("profile over %lld steps: step %.1f ms, compute ops %.1f ms (%.1f%%), "
                "NCCL collectives %.1f ms (%.1f%%, partly overlapped)\n",
                (long long)steps, step_ms, compute_ms, 100 * compute_ms / step_ms, comm_ms, 100 * comm_ms / step_ms);
    for (const auto& row : group_table) {
      std::printf("%8.2f %6.1f%%  %s", row["ms_per_step"].get<double>(), 100 * row["share_of_step"].get<double>(),
                  row["group"].get<std::string>().c_str());
      if (row.contains("tflops")) std::printf(" (%.3g TFLOP/s)", row["tflops"].get<double>());
      std::printf("\n");
    }
    std::printf("%8s %7s %7s  %s\n", "ms/step", "share", "calls", "op");
    for (const auto& row : table)
      std::printf("%8.2f %6.1f%% %7.0f  %s\n", row["ms_per_step"].get<double>(),
                  100 * row["share_of_step"].get<double>(), row["calls_per_step"].get<double>(),
                  row["op"].get<std::string>().c_str());
  }
  return {{"step_ms", step_ms}, {"compute_ms_per_step", compute_ms}, {"comm_ms_per_step", comm_ms},
          {"groups", group_table}, {"ops", table}};
}

// The runtime's keys and bench.*: every tool parses through one schema.
ConfigSchema bench_schema() {
  ConfigSchema s("bb-bench", "bb-bench backend=bb hf_path=DIR [backend.parallel.tp=N ...] [bench.steps=10 ...]");
  s.add_runtime_keys();
  // Random init unless the directory has the weights, so a bare config.json benchmarks too.
  s.override_default("backend.load_hf_weights", [](const RuntimeConfig& c) { return has_weights(c.hf_path); },
                     "true when hf_path holds safetensors");
  using T = ConfigType;
  s.add(ConfigKey{"bench.seq_len", "bench", T::Int, 4096, "tokens per sequence"}.at_least(2));
  s.add(ConfigKey{"bench.num_microbatches", "bench", T::Int, 1, "microbatches per step (gradient accumulation)"}
            .in_range(1, std::numeric_limits<int>::max()));
  s.add(ConfigKey{"bench.micro_batch_size", "bench", T::Int, 1, "sequences per microbatch"}.at_least(1));
  s.add(ConfigKey{"bench.steps", "bench", T::Int, 10, "timed steps"}.at_least(1));
  s.add(ConfigKey{"bench.warmup", "bench", T::Int, 2, "untimed steps before them"}.at_least(0));
  s.add(ConfigKey{"bench.truncate_layers", "bench", T::Int, 0, "keep the first L layers of the model (0: all)"}.at_least(0));
  s.add(ConfigKey{"bench.profile_steps", "bench", T::Int, 0, "steps after the timed ones with op profiling on (0: none)"}
            .at_least(0));
  s.add(ConfigKey{"bench.offload", "bench", T::Bool, false,
                  "after the timed steps, time an offload round trip of the model's state and its device memory"});
  s.add(ConfigKey{"output_json", "bench", T::String, "", "also write the JSON summary to this file"});
  return s;
}

// Runtime::to there and back: seconds each way, the tensors' bytes on the
// device and the driver's free bytes before and after, and the step after it.
template <typename StepFn>
nlohmann::json offload_round_trip(Runtime& rt, ModelHandle& h, StepFn&& timed_step) {
  const Device dev = rt.device();
  constexpr double GB = double(1ull << 30);
  auto seconds_of = [&](Device target) {
    device_synchronize(dev);
    const auto t0 = std::chrono::steady_clock::now();
    rt.to(h, target);
    device_synchronize(dev);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  device_release_cached(dev);   // what the last step's activations left in the pool
  const size_t tensors_before = device_bytes_in_use(dev);
  const size_t free_before = device_memory_info(dev).free_bytes;
  const double to_host_s = seconds_of(Device::cpu());
  const size_t tensors_offloaded = device_bytes_in_use(dev);
  const size_t free_offloaded = device_memory_info(dev).free_bytes;
  const double to_device_s = seconds_of(dev);
  const double step_ms = timed_step();
  return {{"to_cpu_s", to_host_s}, {"to_device_s", to_device_s},
          {"device_tensors_gb_before", double(tensors_before) / GB},
          {"device_tensors_gb_offloaded", double(tensors_offloaded) / GB},
          {"device_free_gb_before", double(free_before) / GB}, {"device_free_gb_offloaded", double(free_offloaded) / GB},
          {"released_gb", (double(free_offloaded) - double(free_before)) / GB}, {"step_ms_after", step_ms}};
}

int run(int argc, char** argv) {
  const ConfigSchema schema = bench_schema();
  if (asks_for_help(argc, argv)) {
    std::fputs(schema.help().c_str(), stdout);
    return 0;
  }
  const ConfigArgs args = schema.parse(argc, argv);
  BB_CHECK(args.has("hf_path"), "hf_path=DIR is required (a directory with config.json)");
  RuntimeConfig cfg = args.runtime;
  BBConfig& b = cfg.backend_cfg;
  if (args.integer("bench.truncate_layers") > 0) b.model_overrides["num_layers"] = args.integer("bench.truncate_layers");
  const int64_t seq_len = args.integer("bench.seq_len");
  const int num_mb = int(args.integer("bench.num_microbatches"));
  const int64_t mbs = args.integer("bench.micro_batch_size");
  const int64_t steps = args.integer("bench.steps"), warmup = args.integer("bench.warmup");
  const int64_t profile_steps = args.integer("bench.profile_steps");

  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const bool root = rt->parallel_state().world_rank() == 0;
  const int64_t vocab = h.model().vocab_size();
  // Each dp rank draws its own tokens; tp ranks of one dp rank share them.
  Generator gen(b.seed * 7919 + uint64_t(h.dp_rank()));
  PackedBatch batch;
  for (int64_t s = 0; s < num_mb * mbs; ++s) {
    for (int64_t t = 0; t < seq_len; ++t) batch.input_ids.push_back(int64_t(gen.next_u64() % uint64_t(vocab)));
    batch.seq_lens.push_back(seq_len);
  }
  const int64_t tokens_per_rank = num_mb * mbs * seq_len;
  const int64_t tokens_per_step = tokens_per_rank * h.dp_size();
  const int world = rt->parallel_state().world_size();
  const double flops_per_step = h.model().train_flops(tokens_per_step, seq_len);

  auto train = rt->train_mode(h);
  std::vector<double> times;
  double peak_gb = 0;
  ForwardResult r;
  OptimizerStepResult s;
  // One training step, timed host to host with the device drained; returns ms.
  auto timed_step = [&] {
    device_synchronize(rt->device());
    const auto t0 = std::chrono::steady_clock::now();
    rt->zero_grad(h);
    r = rt->forward_backward(h, batch, {}, num_mb);
    s = rt->optimizer_step(h);
    rt->lr_scheduler_step(h);
    device_synchronize(rt->device());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // The step's own memory is what the peak adds to what is held before it.
  const size_t in_use_before_step = device_bytes_in_use(rt->device());
  device_reset_peak(rt->device());
  GpuPowerMonitor power(rt->device());
  for (int64_t step = 0; step < warmup + steps; ++step) {
    if (step == warmup) power.start();
    const double ms = timed_step();
    peak_gb = std::max(peak_gb, double(device_peak_bytes(rt->device())) / double(1ull << 30));
    const double tflops = flops_per_step / world / (ms * 1e-3) / 1e12;
    if (step >= warmup) times.push_back(ms);
    if (root)
      std::printf("step %3lld%s loss %.4f grad_norm %.4f step_ms %.1f tokens/s %.0f tflops/gpu %.1f mfu %.1f%% peak_mem_gb %.2f\n",
                  (long long)step, step < warmup ? " (warmup)" : "", r.loss, s.grad_norm, ms,
                  double(tokens_per_step) / (ms * 1e-3), tflops, 100.0 * tflops * 1e12 / kPeakBf16Flops, peak_gb);
  }
  const GpuPowerReport power_report = power.stop();
  double avg = 0;
  for (double t : times) avg += t;
  avg /= double(times.size());
  const ParallelConfig& p = b.parallel;
  nlohmann::json summary = {
      {"backend", cfg.backend}, {"model", h.config()["model_type"]}, {"hf_path", cfg.hf_path},
      {"device", rt->device().str()}, {"tp", p.tp}, {"etp", p.etp}, {"ep", p.ep}, {"pp", p.pp}, {"vpp", p.vpp},
      {"cp", p.cp}, {"dp", h.dp_size()}, {"seq_len", seq_len}, {"num_microbatches", num_mb},
      {"micro_batch_size", mbs}, {"num_layers", h.config()["num_layers"]}, {"recompute", b.recompute},
      {"recompute_modules", b.recompute_modules}, {"recompute_method", b.recompute_method},
      {"recompute_num_layers", b.recompute_num_layers}, {"fp32_residual_connection", b.fp32_residual_connection},
      {"offload_fraction", b.optimizer.offload_fraction},
      {"avg_step_ms", avg}, {"peak_mem_gb", peak_gb}, {"tok_per_s", double(tokens_per_step) / (avg * 1e-3)},
      {"tok_per_s_per_gpu", double(tokens_per_step) / (avg * 1e-3) / world},
      {"tflops_per_gpu", flops_per_step / world / (avg * 1e-3) / 1e12},
      {"mfu", flops_per_step / world / (avg * 1e-3) / kPeakBf16Flops}};
  // After the first step, so lazily allocated optimizer state is counted.
  summary["memory"] = memory_breakdown_json(memory_breakdown(h), in_use_before_step, device_peak_bytes(rt->device()));
  if (root) {
    const nlohmann::json& m = summary["memory"];
    std::printf("memory (GiB): weights %.2f grads %.2f master %.2f moments %.2f other %.2f activations+workspace %.2f "
                "peak %.2f\n", m["weights_gb"].get<double>(), m["grads_gb"].get<double>(), m["master_gb"].get<double>(),
                m["moments_gb"].get<double>(), m["other_static_gb"].get<double>(),
                m["activations_and_workspace_gb"].get<double>(), m["peak_gb"].get<double>());
    if (b.optimizer.offload_fraction > 0)
      std::printf("host memory (GiB, optimizer.offload_fraction %g): master %.2f moments %.2f staging %.2f\n",
                  b.optimizer.offload_fraction, m["host_master_gb"].get<double>(), m["host_moments_gb"].get<double>(),
                  m["host_staging_gb"].get<double>());
  }
  if (power_report.measured) {
    summary["gpu_power"] = gpu_power_json(power_report, steps, double(tokens_per_rank));
    if (root) print_gpu_power(summary["gpu_power"]);
  }
  if (profile_steps > 0) summary["profile"] = profile(timed_step, profile_steps, root);
  if (args.flag("bench.offload")) summary["offload"] = offload_round_trip(*rt, h, timed_step);
  if (root) {
    std::cout << summary.dump() << std::endl;
    if (!args.str("output_json").empty()) {
      std::ofstream f(args.str("output_json"));
      f << summary.dump(2) << "\n";
      BB_CHECK(f.good(), "cannot write ", args.str("output_json"));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
