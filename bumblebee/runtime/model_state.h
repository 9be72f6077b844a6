// ModelState: everything a ModelHandle refers to (protocol, model chunks,
// optimizer, lr schedule, mode).
#pragma once

#include <memory>

#include "bumblebee/model/protocol.h"
#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/lr_schedule.h"
#include "bumblebee/runtime/config.h"
#include "bumblebee/runtime/offload.h"
#include "bumblebee/runtime/pipeline_layout.h"

namespace bb {

struct ModelState {
  BBConfig cfg;
  nlohmann::json hf_config;              // config.json as read
  std::shared_ptr<dist::ParallelState> parallel;
  std::shared_ptr<ParallelContext> context;       // the groups the model's modules use
  std::shared_ptr<ModelProtocol> protocol;         // builds, loads and exports the model
  PipelineLayout layout;                           // every rank's pieces (pp = 1: the whole model)
  std::vector<std::unique_ptr<ModelChunk>> chunks;  // this rank's virtual stages 0..vpp-1
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::unique_ptr<LRSchedule> schedule;
  int64_t scheduler_steps = 0;
  bool training = true;
  // Microbatches trained since the last optimizer step: with the step, the
  // LoRA dropout key of the next one (several forward_backward calls of one
  // step draw new masks; a resumed run draws the uninterrupted run's).
  int64_t microbatches_this_step = 0;
  OffloadParts offloaded{false, false, false};   // the parts on the host (Runtime::to)
};

}  // namespace bb
