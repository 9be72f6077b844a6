// LRSchedule.
#include "bumblebee/primitive/optim/lr_schedule.h"

#include <cmath>

#include "bumblebee/core/error.h"

namespace bb {

LRSchedule::LRSchedule(const LRScheduleConfig& cfg) : cfg_(cfg) {
  const std::string& s = cfg.decay_style;
  BB_CHECK(s == "constant" || s == "linear" || s == "cosine" || s == "WSD", "unknown lr_decay_style '", s,
           "' (expected constant, linear, cosine or WSD)");
  BB_CHECK(cfg.warmup_steps >= 0 && cfg.decay_steps >= 0, "lr_warmup_steps and lr_decay_steps must be >= 0");
  BB_CHECK(s == "constant" || cfg.decay_steps > cfg.warmup_steps, "lr_decay_steps (", cfg.decay_steps,
           ") must exceed lr_warmup_steps (", cfg.warmup_steps, ") for lr_decay_style ", s);
  // Checked here, not when the WSD tail is reached thousands of steps into a run.
  const std::string& w = cfg.wsd_decay_style;
  BB_CHECK(s != "WSD" || w == "linear" || w == "cosine" || w == "exponential", "unknown lr_wsd_decay_style '", w,
           "' (expected linear, cosine or exponential)");
}

double LRSchedule::lr_at(int64_t step) const {
  const LRScheduleConfig& c = cfg_;
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return c.warmup_init + (c.lr - c.warmup_init) * double(step) / double(c.warmup_steps);
  if (c.decay_style == "constant") return c.lr;
  if (step > c.decay_steps) return c.min_lr;
  const double span = double(c.decay_steps - c.warmup_steps);
  const double ratio = double(step - c.warmup_steps) / span;
  double coeff = 1.0;
  if (c.decay_style == "linear") {
    coeff = 1.0 - ratio;
  } else if (c.decay_style == "cosine") {
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  } else {  // WSD: stable at lr until the last wsd_decay_steps, then decay
    const int64_t tail_start = c.decay_steps - c.wsd_decay_steps;
    if (step <= tail_start) return c.lr;
    const double r = double(step - tail_start) / double(std::max<int64_t>(c.wsd_decay_steps, 1));
    if (c.wsd_decay_style == "linear") coeff = 1.0 - r;
    else if (c.wsd_decay_style == "cosine") coeff = 0.5 * (std::cos(M_PI * r) + 1.0);
    else coeff = 2.0 * std::pow(0.5, r) - 1.0;  // exponential: from 1 at the tail's start to 0 at its end
  }
  return c.min_lr + coeff * (c.lr - c.min_lr);
}

}  // namespace bb
