// ParallelContext: the process groups a module may need, handed to every
// module at construction instead of one tensor-parallel group.
//
// It wraps dist::ParallelState (Megatron's layout of tp, cp, ep, etp, dp, pp
// and their products) and owns the TensorParallel region helpers over the tp
// group (dense layers) and the etp group (expert layers). A module takes what
// it needs from it: attention the tp group (and cp for ring attention), an
// MoE layer ep and etp, the LM head tp. Model code never calls a collective
// itself; the parallel primitives these groups feed do.
#pragma once

#include <memory>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

class ParallelContext {
 public:
  explicit ParallelContext(std::shared_ptr<dist::ParallelState> state);

  dist::ParallelState& state() { return *state_; }
  TensorParallel& tp() { return tp_; }     // dense layers
  TensorParallel& etp() { return etp_; }   // expert layers
  dist::Communicator& cp() { return state_->cp(); }
  dist::Communicator& ep() { return state_->ep(); }
  dist::Communicator& pp() { return state_->pp(); }
  dist::Communicator& dp() { return state_->dp(); }
  dist::Communicator& dp_cp() { return state_->dp_cp(); }
  dist::Communicator& edp() { return state_->edp(); }

 private:
  std::shared_ptr<dist::ParallelState> state_;
  TensorParallel tp_, etp_;
};

}  // namespace bb
