// TensorParallel: the communication at the edges of a tensor-parallel region.
//
// With more than one tp rank Bumblebee always runs sequence parallel (as
// Megatron-LM recommends): outside a region the activations are split along
// the token dimension (rows), inside a region they are whole and the hidden
// features (heads, ffn columns, vocabulary) are split. A region is entered
// before the column-parallel GEMMs and exited after a row-parallel GEMM or a
// vocab-parallel embedding:
//   enter: all-gather tokens        enter_backward: reduce-scatter
//   exit:  reduce-scatter tokens    exit_backward:  all-gather
// With one rank every operation is the identity and moves no data.
//
// Replicated parameters (norm weights) see only part of the data on each rank
// (their rank's tokens, or their rank's heads for q/k norm), so their
// gradients are summed over the group once per step.
#pragma once

#include "bumblebee/distributed/communicator.h"

namespace bb {

class TensorParallel {
 public:
  explicit TensorParallel(dist::Communicator& group) : group_(&group) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  dist::Communicator& group() { return *group_; }

  Tensor enter(const Tensor& x);            // [T/tp, H] -> [T, H]
  Tensor enter_backward(const Tensor& dx);  // [T, H] -> [T/tp, H], summed over ranks
  Tensor exit(const Tensor& y);             // partial sums [T, H] -> [T/tp, H]
  Tensor exit_backward(const Tensor& dy);   // [T/tp, H] -> [T, H]
  void reduce_replicated_grad(Tensor& grad);

 private:
  dist::Communicator* group_;
};

}  // namespace bb
