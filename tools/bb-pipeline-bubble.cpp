// bb-pipeline-bubble: the pipeline bubble of the schedules, measured.
//
//   mpirun -np PP bb-pipeline-bubble [vpp=1] [num_microbatches=8] [forward_ms=20] [backward_ms=40] [steps=3]
//
// Each rank is one pipeline stage and runs its real action list
// (pipeline_schedule.h) with real batched send/recv of a small activation
// over MPI, but each forward (backward) of a chunk sleeps forward_ms / vpp
// (backward_ms / vpp) instead of computing, so ranks do not compete for CPU
// cores and the time a rank is not "computing" is the bubble. Prints one JSON
// line: the measured idle fraction (1 - compute time / (pp x wall time), the
// fastest step of `steps`), the all-ranks simulation's with the same costs,
// and Megatron's (pp - 1) / (vpp x m + pp - 1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/pipeline_schedule.h"
#include "bumblebee/runtime/pipeline_simulation.h"
#include "bumblebee/runtime/tool_main.h"

namespace bb {
namespace {

using Clock = std::chrono::steady_clock;

ConfigSchema bubble_schema() {
  ConfigSchema s("bb-pipeline-bubble", "mpirun -np PP bb-pipeline-bubble [vpp=N] [num_microbatches=M] ...");
  using T = ConfigType;
  const std::string g = "bb-pipeline-bubble";
  s.add(ConfigKey{"vpp", g, T::Int, 1, "virtual stages per rank (interleaved 1F1B when > 1)"}.at_least(1));
  s.add(ConfigKey{"num_microbatches", g, T::Int, 8, "microbatches per step"}.at_least(1));
  s.add(ConfigKey{"forward_ms", g, T::Float, 20.0, "one microbatch's forward through a rank's layers"}.above(0));
  s.add(ConfigKey{"backward_ms", g, T::Float, 40.0, "one microbatch's backward through a rank's layers"}.above(0));
  s.add(ConfigKey{"steps", g, T::Int, 3, "timed steps (the fastest is reported)"}.at_least(1));
  return s;
}

int run(int argc, char** argv) {
  const ConfigSchema schema = bubble_schema();
  if (asks_for_help(argc, argv)) {
    std::fputs(schema.help().c_str(), stdout);
    return 0;
  }
  const ConfigArgs args = schema.parse(argc, argv);
  dist::World& world = dist::World::instance();
  dist::GroupSizes sizes;
  sizes.pp = world.size();
  const auto ps = dist::ParallelState::create(world, sizes);
  dist::Communicator& pp = ps->pp();
  const int vpp = int(args.integer("vpp")), m = int(args.integer("num_microbatches"));
  const double fwd_ms = args.number("forward_ms") / vpp, bwd_ms = args.number("backward_ms") / vpp;
  const std::vector<PipelineAction> actions = pipeline_schedule(pp.size(), vpp, pp.rank(), m, false);
  auto sleep_ms = [](double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
  double best_idle = 1;
  for (int64_t step = 0; step < args.integer("steps"); ++step) {
    pp.barrier();
    const Clock::time_point start = Clock::now();
    double busy_ms = 0;
    for (const PipelineAction& a : actions) {
      if (a.kind != PipelineAction::Kind::Exchange) {
        const double ms = a.kind == PipelineAction::Kind::Forward ? fwd_ms : bwd_ms;
        const Clock::time_point t0 = Clock::now();
        sleep_ms(ms);
        busy_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        continue;
      }
      std::vector<Tensor> buffers;
      std::vector<dist::P2POp> ops;
      for (const PipelineMessage& msg : a.messages) {
        buffers.push_back(Tensor::zeros({64, 16}, DType::F32));
        ops.push_back(msg.send ? dist::P2POp::send(buffers.back(), msg.peer) : dist::P2POp::recv(buffers.back(), msg.peer));
      }
      pp.batch_isend_irecv(ops)->wait();
    }
    pp.barrier();
    const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    const double busy_all = pp.all_reduce_scalar(busy_ms);
    best_idle = std::min(best_idle, 1.0 - busy_all / (pp.size() * wall_ms));
  }
  if (pp.rank() != 0) return 0;
  std::vector<std::vector<PipelineAction>> programs;
  for (int r = 0; r < pp.size(); ++r) programs.push_back(pipeline_schedule(pp.size(), vpp, r, m, false));
  const PipelineSimulation sim = simulate_pipeline(programs, fwd_ms, bwd_ms);
  const nlohmann::json out = {{"pp", pp.size()}, {"vpp", vpp}, {"num_microbatches", m},
                              {"measured_idle_fraction", best_idle}, {"simulated_idle_fraction", sim.idle_fraction()},
                              {"megatron_formula", double(pp.size() - 1) / (vpp * m + pp.size() - 1)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace bb

int main(int argc, char** argv) { return bb::run_tool(argc, argv, bb::run); }
