// GradReducer: the reduce-scatter of one parameter group's gradient buckets
// over the group's communicator, started while backward still runs and
// awaited by the optimizer step.
//
// On the last microbatch of a step the model reports each parameter whose
// gradient is final (grad_ready); when a bucket's last parameter arrives its
// reduce-scatter starts (Communicator::reduce_scatter_async), so the
// transfers of the late layers overlap the backward of the early ones.
// This rank's slice of every bucket (the same slice index in each) lands in
// one shard buffer, the slices concatenated in buffer order; the optimizer's
// state covers exactly that shard. With dp = 1 nothing is launched and the
// shard is the flat gradient buffer itself.
#pragma once

#include <memory>
#include <vector>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

class GradReducer {
 public:
  // Where this rank's slice of one bucket lies in the flat buffers and in the shard.
  struct Slice {
    int64_t flat_begin = 0, shard_begin = 0, numel = 0;
  };

  GradReducer(ParamGroup& group, dist::Communicator& comm);

  // In buffer order; with dp = 1 a single slice covering the whole buffer.
  const std::vector<Slice>& slices() const { return slices_; }
  int64_t shard_numel() const { return shard_numel_; }

  // The gradients are about to change (zero_grad, a new backward): waits for
  // the reductions in flight, which are then stale, and re-arms grad_ready.
  void invalidate();
  // The last backward of the step is done with `p`; starts its bucket's
  // reduction when `p` was the bucket's last parameter.
  void grad_ready(const Parameter& p);
  // After that backward: checks that every parameter was reported.
  void check_all_reported() const;
  // This rank's slices of the dp-summed gradients, waiting for the buckets
  // in flight (and reducing now any not started since the gradients changed).
  Tensor& reduced_grads();
  // The buffer reduced_grads() returns, as it stands (no waiting): with dp = 1
  // it is the group's flat gradients.
  const Tensor& shard() const { return shard_; }

 private:
  void launch(size_t bucket);
  ParamGroup* group_;
  dist::Communicator* dp_;
  std::vector<Slice> slices_;
  int64_t shard_numel_ = 0;
  Tensor shard_;                             // dp > 1: the reduced slices
  std::vector<size_t> bucket_of_param_;      // by index in the group
  std::vector<bool> reported_;               // by index in the group
  std::vector<size_t> unreported_;           // per bucket: parameters not yet reported
  std::vector<std::unique_ptr<dist::PendingCollective>> in_flight_;   // per bucket
  std::vector<bool> launched_;               // per bucket, since the gradients last changed
  // Buckets started, in start order; those before polled_ have arrived.
  std::vector<size_t> started_;
  size_t polled_ = 0;
};

}  // namespace bb
