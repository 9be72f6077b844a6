// Runs the pipeline schedules of every rank together, without a model: each
// compute action takes a fixed time, each Exchange completes once every one
// of its messages has met its counterpart (a send its receive, in the
// per-pair issue order the Communicator guarantees, and the other way round:
// the blocking, rendezvous case, the one that can deadlock). It checks that
// the k-th send from rank a to rank b carries what the k-th receive of b from
// a expects, that no Exchange waits forever and that no message is left over,
// and measures the pipeline bubble: the idle fraction of the ranks.
#pragma once

#include <string>
#include <vector>

#include "bumblebee/runtime/pipeline_schedule.h"

namespace bb {

struct PipelineSimulation {
  bool ok = false;
  std::string error;        // the deadlock (each blocked rank's action) or the mismatched message
  double makespan = 0;      // time until the last rank finishes
  double busy = 0;          // compute time summed over ranks
  double idle_fraction() const { return makespan > 0 && ranks > 0 ? 1.0 - busy / (ranks * makespan) : 0.0; }
  int ranks = 0;
  int messages = 0;         // matched send/receive pairs
};

// `programs[r]` is pp rank r's action list; a forward of one chunk takes
// `forward_cost`, a backward `backward_cost`.
PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& programs, double forward_cost,
                                     double backward_cost);

}  // namespace bb
