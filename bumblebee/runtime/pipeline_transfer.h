// What the runtime moves over the pipeline group besides the schedule's
// activations: the tied embedding's gradient between the first and the last
// stage, the step's results from the last stage (which alone sees the loss)
// to every stage, and exported weights from each stage to every rank.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/runtime/contracts.h"

namespace bb {

// Sums `tied`'s gradient with its copy's on the other end of the pipeline
// (pp rank 0 <-> pp rank pp - 1); both ends get the same bits (a + b == b + a).
void sum_tied_grad_over_pipeline_ends(dist::Communicator& pp, Parameter& tied);

// The last pp rank's microbatch outputs, metrics and local loss sum replace
// those of every other pp rank.
void broadcast_from_last_stage(dist::Communicator& pp, Device dev, ForwardResult& result, double& local_loss_sum);

// Every pp rank's per-microbatch metrics (at least `num_microbatches` values
// each, missing ones 0), summed over the pp ranks that report them, on every pp rank.
void sum_metrics_over_stages(dist::Communicator& pp, Device dev, std::map<std::string, std::vector<double>>& metrics,
                             size_t num_microbatches);

// pp rank `root`'s (name, host tensor) pairs on every pp rank; `mine` is
// read on the root only. Tensors travel through `dev` (NCCL needs device memory).
std::vector<std::pair<std::string, Tensor>> broadcast_named_tensors(
    dist::Communicator& pp, int root, Device dev, const std::vector<std::pair<std::string, Tensor>>& mine);

}  // namespace bb
