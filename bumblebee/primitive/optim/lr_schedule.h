// Learning-rate schedule: linear warmup, then constant / linear / cosine / WSD
// decay to min_lr, as Megatron-Core's OptimizerParamScheduler defines them.
#pragma once

#include <cstdint>
#include <string>

namespace bb {

struct LRScheduleConfig {
  double lr = 1e-4, min_lr = 0.0;
  int64_t warmup_steps = 0;
  double warmup_init = 0.0;
  int64_t decay_steps = 0;             // step at which decay ends (0: no decay)
  std::string decay_style = "constant";   // constant | linear | cosine | WSD
  std::string wsd_decay_style = "linear"; // shape of the WSD tail: linear | cosine | exponential
  int64_t wsd_decay_steps = 0;         // length of the WSD tail
};

class LRSchedule {
 public:
  explicit LRSchedule(const LRScheduleConfig& cfg);
  double lr_at(int64_t step) const;   // step counts optimizer steps taken, from 0

 private:
  LRScheduleConfig cfg_;
};

}  // namespace bb
