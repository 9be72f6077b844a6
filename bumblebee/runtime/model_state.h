// ModelState: everything a ModelHandle refers to (model, optimizer, schedule, mode).
#pragma once

#include <memory>

#include "bumblebee/model/protocol.h"
#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/lr_schedule.h"
#include "bumblebee/runtime/config.h"

namespace bb {

struct ModelState {
  BBConfig cfg;
  nlohmann::json hf_config;              // config.json as read
  std::shared_ptr<dist::ParallelState> parallel;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::unique_ptr<LRSchedule> schedule;
  int64_t scheduler_steps = 0;
  bool training = true;
};

}  // namespace bb
