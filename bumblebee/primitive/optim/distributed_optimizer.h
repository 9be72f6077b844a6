// DistributedOptimizer: AdamW over the parameter groups of a model, each
// sharded over its own gradient communicator (ZeRO-1).
//
// For every trainable group, each rank of the group's communicator owns the
// same slice index of every gradient bucket (see grad_reducer.h): its fp32
// master weights (or the parameters themselves when they already are the
// master dtype and the group has one rank; bf16 with bf16_main_params) and
// Adam moments (fp32, or bf16 with bf16_exp_avg / bf16_exp_avg_sq) cover those
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
//
// With offload_fraction > 0 a prefix of each shard's optimizer state lives in
// host memory (optimizer_offload.h): each step its reduced gradients go down
// on a copy stream, the host runs the same AdamW on them (the CPU op) while
// the device steps the rest, and the updated weights go back up before the
// all-gather. The norm, clipping and skipping see the whole shard as before.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/core/host_copy_stream.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/optim/grad_reducer.h"
#include "bumblebee/primitive/optim/optimizer_offload.h"

namespace bb {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  double clip_grad = 1.0;   // <= 0 disables clipping
  double offload_fraction = 0.0;   // of the optimizer state's bytes, kept and stepped on the host
  // Storage of the optimizer state (optimizer.exp_avg_dtype,
  // optimizer.exp_avg_sq_dtype, optimizer.main_params_dtype): bf16 moments
  // instead of the master dtype, and bf16 parameters as their own master (no
  // fp32 copy). AdamW computes in fp32 and rounds on store (ops.h). Each needs
  // bf16 parameters and no offload.
  bool bf16_exp_avg = false, bf16_exp_avg_sq = false, bf16_main_params = false;
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
    // This rank's bucket slices, in buffer order, from host.numel on (the
    // part that steps on the device); a master that is the parameters is the
    // whole flat buffer, its host prefix mirrored in host.master.
    Tensor master, exp_avg, exp_avg_sq;
    HostOptimizerState host;   // the shard's first host.numel elements
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
  // communicator; bucket padding zero), in the state's own dtype;
  // scatter_state takes this rank's slices back from such a buffer in any
  // floating dtype, converting. Collective over the
  // group's communicator. Checkpoints save and load the state per parameter
  // through them, whatever the dp layout.
  enum class State { Master, ExpAvg, ExpAvgSq };
  Tensor gather_state(GroupState& g, State which);
  void scatter_state(GroupState& g, State which, const Tensor& full);
  // What an offload moves: the device-resident master weights and Adam
  // moments (without the master when it is the parameters themselves; the
  // offload_fraction part is on the host already), and the reduced-gradient
  // shards. Views sharing the live buffers.
  std::vector<Tensor> state_tensors() const;
  std::vector<Tensor> grad_shards() const;
  // Refresh the master slices from the parameters (after loading weights).
  void reload_master_from_params();

 private:
  // The squared global gradient norm and the zero count (each element once).
  ops::SquaresAndZeros grad_norm_squared_and_zeros();
  void all_gather_params(GroupState& g, const Tensor& param_shard);
  dist::ParallelState* parallel_;
  AdamWConfig cfg_;
  std::vector<GroupState> groups_;
  std::unique_ptr<HostCopyStream> copies_;   // when some group has a host part
  int host_threads_ = 1;                     // for the host part's AdamW
  int64_t step_ = 0;
};

}  // namespace bb
