// DistributedOptimizer: AdamW over the flat parameter buffer, sharded over
// the data-parallel group (ZeRO-1).
//
// Each dp rank owns the same slice index of every gradient bucket (see
// grad_reducer.h): its fp32 master weights (or the parameters themselves when
// they already are the master dtype and dp = 1) and Adam moments cover those
// slices, concatenated in buffer order. A step waits for the bucketed
// reduce-scatter of the summed gradients, takes the global gradient norm over
// every rank (each tp-replicated parameter counted once), clips, skips the
// update when the norm is not finite, updates the local slices, and
// all-gathers the parameters bucket by bucket.
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
  DistributedOptimizer(ParamStore& store, dist::ParallelState& parallel, const AdamWConfig& cfg);
  OptimizerStepResult step(double lr);
  int64_t steps_taken() const { return step_; }
  // The bucketed gradient reduction the runtime drives during backward.
  GradReducer& grads() { return reducer_; }
  // State for checkpoints: this rank's bucket slices, in buffer order.
  Tensor& master() { return master_; }
  Tensor& exp_avg() { return exp_avg_; }
  Tensor& exp_avg_sq() { return exp_avg_sq_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // Refresh the master slices from the parameters (after loading weights).
  void reload_master_from_params();

 private:
  double grad_norm_squared(const Tensor& shard_grad);
  void all_gather_params();
  ParamStore* store_;
  dist::ParallelState* parallel_;
  AdamWConfig cfg_;
  GradReducer reducer_;
  bool master_is_param_ = false;
  Tensor master_, exp_avg_, exp_avg_sq_;
  // [begin, end) ranges of tp-replicated parameters inside this rank's shard.
  std::vector<std::pair<int64_t, int64_t>> replicated_ranges_;
  int64_t padding_in_shard_ = 0;   // shard elements that belong to no parameter
  int64_t step_ = 0;
};

}  // namespace bb
