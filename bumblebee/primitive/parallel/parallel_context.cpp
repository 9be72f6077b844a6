// ParallelContext construction.
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

ParallelContext::ParallelContext(std::shared_ptr<dist::ParallelState> state)
    : state_(std::move(state)), tp_(state_->tp()), etp_(state_->etp()) {}

}  // namespace bb
