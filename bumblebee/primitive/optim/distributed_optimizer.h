// DistributedOptimizer: AdamW over the parameter groups of a model, each
// sharded over its own gradient communicator (ZeRO-1).
//
// For every trainable group, each rank of the group's communicator owns the
// same slice index of every gradient bucket (see grad_reducer.h): its fp32
// master weights (or the parameters themselves when they already are the
// master dtype and the group has one rank) and Adam moments cover those
// slices, concatenated in buffer order. A step waits for the bucketed
// reduce-scatters of the summed gradients, takes the global gradient norm
// over every group and rank (each parameter counted once: tp-replicated ones
// on tp rank 0 only), clips, skips the update when the norm is not finite,
// updates the local slices with the group's lr and weight-decay multipliers,
// and all-gathers each group's parameters bucket by bucket. Frozen groups
// have no state and are never touched. A pipeline rank with several virtual
// stages passes each stage's ParamStore; parameters that another rank holds
// a copy of (a tied embedding's copy on the last pipeline stage) are given as
// counted_elsewhere and left out of the norm, so it counts them once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/optim/grad_reducer.h"

namespace bb {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  double clip_grad = 1.0;   // <= 0 disables clipping
};

struct OptimizerStepResult {
  bool update_successful = false;
  double grad_norm = 0.0;
  int64_t num_zeros_in_grad = 0;   // zero gradient entries of the parameters (bucket padding excluded)
};

class DistributedOptimizer {
 public:
  // The optimizer state of one trainable group.
  struct GroupState {
    ParamGroup* group = nullptr;
    int store_index = 0;   // which of the constructor's stores holds the group
    dist::Communicator* comm = nullptr;
    std::unique_ptr<GradReducer> reducer;
    bool master_is_param = false;
    Tensor master, exp_avg, exp_avg_sq;   // this rank's bucket slices, in buffer order
    // [begin, end) ranges inside this rank's shard that another rank counts
    // in the gradient norm and the zero count: tp-replicated parameters off tp rank 0, and the
    // counted_elsewhere ones.
    std::vector<std::pair<int64_t, int64_t>> replicated_ranges;
    int64_t padding_in_shard = 0;   // shard elements that belong to no parameter
  };

  DistributedOptimizer(ParamStore& store, dist::ParallelState& parallel, const AdamWConfig& cfg);
  DistributedOptimizer(const std::vector<ParamStore*>& stores, dist::ParallelState& parallel, const AdamWConfig& cfg,
                       const std::vector<const Parameter*>& counted_elsewhere);
  OptimizerStepResult step(double lr);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }

  // The bucketed gradient reductions the runtime drives during backward.
  // The gradients are about to change: waits for reductions in flight.
  void invalidate_grads();
  // The last backward of the step is done with `p` (a trainable parameter).
  void grad_ready(const Parameter& p);
  // After that backward: every trainable parameter was reported.
  void check_all_reported() const;

  // One entry per trainable group, in the store's group order (checkpoints
  // save and restore master, exp_avg and exp_avg_sq of each).
  std::vector<GroupState>& groups() { return groups_; }
  // A group's master weights or Adam moments as one buffer in the layout of
  // its flat parameters (every rank's slices gathered over the group's
  // communicator; bucket padding zero), in the master dtype; scatter_state
  // takes this rank's slices back from such a buffer. Collective over the
  // group's communicator. Checkpoints save and load the state per parameter
  // through them, whatever the dp layout.
  enum class State { Master, ExpAvg, ExpAvgSq };
  Tensor gather_state(GroupState& g, State which);
  void scatter_state(GroupState& g, State which, const Tensor& full);
  // What an offload moves: the master weights and Adam moments (without the
  // master when it is the parameters themselves), and the reduced-gradient
  // shards. Views sharing the live buffers.
  std::vector<Tensor> state_tensors() const;
  std::vector<Tensor> grad_shards() const;
  // Refresh the master slices from the parameters (after loading weights).
  void reload_master_from_params();

 private:
  double grad_norm_squared();
  void all_gather_params(GroupState& g);
  dist::ParallelState* parallel_;
  AdamWConfig cfg_;
  std::vector<GroupState> groups_;
  int64_t step_ = 0;
};

}  // namespace bb
