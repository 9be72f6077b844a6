// LRSchedule against Megatron-Core's OptimizerParamScheduler.get_lr: the
// formulas are re-derived here from Megatron's code (warmup from init_lr,
// `num_steps > lr_decay_steps` -> min_lr, decay ratio over the steps after
// warmup, WSD's stable phase then a tail of lr_wsd_decay_steps), plus exact
// values at the points where each phase begins and ends.
#include "bumblebee/primitive/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/core/error.h"

using bb::LRSchedule;
using bb::LRScheduleConfig;

namespace {

constexpr double kTol = 1e-12;

LRScheduleConfig config(const std::string& style, int64_t warmup, int64_t decay) {
  LRScheduleConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = warmup;
  c.warmup_init = 0.01;
  c.decay_steps = decay;
  c.decay_style = style;
  return c;
}

// Megatron-Core's get_lr, written out step by step from its definition.
double megatron_lr(const LRScheduleConfig& c, int64_t num_steps) {
  if (c.warmup_steps > 0 && num_steps <= c.warmup_steps)
    return c.warmup_init + (c.lr - c.warmup_init) * double(num_steps) / double(c.warmup_steps);
  if (c.decay_style == "constant") return c.lr;
  if (num_steps > c.decay_steps) return c.min_lr;
  const double decay_ratio = double(num_steps - c.warmup_steps) / double(c.decay_steps - c.warmup_steps);
  const double delta_lr = c.lr - c.min_lr;
  double coeff = 0.0;
  if (c.decay_style == "linear") {
    coeff = 1.0 - decay_ratio;
  } else if (c.decay_style == "cosine") {
    coeff = 0.5 * (std::cos(M_PI * decay_ratio) + 1.0);
  } else {
    const int64_t anneal_start = c.decay_steps - c.wsd_decay_steps;
    if (num_steps <= anneal_start) {
      coeff = 1.0;
    } else {
      const double r = double(num_steps - anneal_start) / double(c.wsd_decay_steps);
      if (c.wsd_decay_style == "linear") coeff = 1.0 - r;
      if (c.wsd_decay_style == "cosine") coeff = 0.5 * (std::cos(M_PI * r) + 1.0);
      if (c.wsd_decay_style == "exponential") coeff = 2.0 * std::pow(0.5, r) - 1.0;
    }
  }
  return c.min_lr + coeff * delta_lr;
}

void expect_matches_megatron(const LRScheduleConfig& c, int64_t last_step) {
  const LRSchedule s(c);
  for (int64_t step = 0; step <= last_step; ++step)
    EXPECT_NEAR(s.lr_at(step), megatron_lr(c, step), kTol) << c.decay_style << " step " << step;
}

}  // namespace

TEST(LRSchedule, WarmupRisesLinearlyFromWarmupInit) {
  const LRSchedule s(config("cosine", 10, 110));
  EXPECT_NEAR(s.lr_at(0), 0.01, kTol);  // step 0 is inside warmup: init_lr
  EXPECT_NEAR(s.lr_at(5), 0.01 + 0.99 * 0.5, kTol);
  EXPECT_NEAR(s.lr_at(10), 1.0, kTol);  // the last warmup step reaches lr
}

TEST(LRSchedule, WithoutWarmupStepZeroIsPeakLr) {
  EXPECT_NEAR(LRSchedule(config("linear", 0, 100)).lr_at(0), 1.0, kTol);
  EXPECT_NEAR(LRSchedule(config("cosine", 0, 100)).lr_at(0), 1.0, kTol);
}

TEST(LRSchedule, ConstantHoldsLrAfterWarmupForever) {
  const LRScheduleConfig c = config("constant", 4, 0);
  expect_matches_megatron(c, 50);
  const LRSchedule s(c);
  EXPECT_NEAR(s.lr_at(2), 0.01 + 0.99 * 0.5, kTol);
  EXPECT_EQ(s.lr_at(5), 1.0);
  EXPECT_EQ(s.lr_at(1'000'000), 1.0);  // constant ignores decay_steps and min_lr
}

TEST(LRSchedule, LinearDecaysToMinLrAtDecaySteps) {
  const LRScheduleConfig c = config("linear", 10, 110);
  expect_matches_megatron(c, 130);
  const LRSchedule s(c);
  EXPECT_NEAR(s.lr_at(60), 0.1 + 0.5 * 0.9, kTol);   // half way through decay
  EXPECT_NEAR(s.lr_at(110), 0.1, kTol);              // decay_steps reached
  EXPECT_EQ(s.lr_at(111), 0.1);                      // past it: min_lr
  EXPECT_EQ(s.lr_at(10'000), 0.1);
}

TEST(LRSchedule, CosineHalvesAtMidpointAndEndsAtMinLr) {
  const LRScheduleConfig c = config("cosine", 10, 110);
  expect_matches_megatron(c, 130);
  const LRSchedule s(c);
  EXPECT_NEAR(s.lr_at(60), 0.1 + 0.5 * 0.9, kTol);
  EXPECT_NEAR(s.lr_at(35), 0.1 + 0.5 * (std::cos(M_PI / 4) + 1.0) * 0.9, kTol);
  EXPECT_NEAR(s.lr_at(110), 0.1, kTol);
  EXPECT_EQ(s.lr_at(200), 0.1);
}

TEST(LRSchedule, MinLrZeroDecaysToZero) {
  LRScheduleConfig c = config("linear", 0, 10);
  c.min_lr = 0.0;
  const LRSchedule s(c);
  EXPECT_NEAR(s.lr_at(3), 0.7, kTol);
  EXPECT_NEAR(s.lr_at(10), 0.0, kTol);
}

TEST(LRSchedule, WsdIsStableThenDecaysInItsTail) {
  for (const std::string tail : {"linear", "cosine", "exponential"}) {
    LRScheduleConfig c = config("WSD", 10, 110);
    c.wsd_decay_style = tail;
    c.wsd_decay_steps = 20;
    expect_matches_megatron(c, 130);
    const LRSchedule s(c);
    EXPECT_EQ(s.lr_at(11), 1.0) << tail;   // stable right after warmup
    EXPECT_EQ(s.lr_at(90), 1.0) << tail;   // ... up to decay_steps - wsd_decay_steps
    EXPECT_NEAR(s.lr_at(110), 0.1, kTol) << tail;  // every tail shape ends at min_lr
    EXPECT_EQ(s.lr_at(111), 0.1) << tail;
  }
  LRScheduleConfig c = config("WSD", 10, 110);
  c.wsd_decay_steps = 20;
  c.wsd_decay_style = "linear";
  EXPECT_NEAR(LRSchedule(c).lr_at(100), 0.1 + 0.5 * 0.9, kTol);
  c.wsd_decay_style = "cosine";
  EXPECT_NEAR(LRSchedule(c).lr_at(100), 0.1 + 0.5 * 0.9, kTol);
  c.wsd_decay_style = "exponential";  // Megatron: 2 * 0.5^r - 1
  EXPECT_NEAR(LRSchedule(c).lr_at(100), 0.1 + (std::sqrt(2.0) - 1.0) * 0.9, kTol);
}

TEST(LRSchedule, WsdWithoutTailStaysAtLrUntilDecaySteps) {
  LRScheduleConfig c = config("WSD", 0, 50);
  c.wsd_decay_steps = 0;
  const LRSchedule s(c);
  EXPECT_EQ(s.lr_at(50), 1.0);
  EXPECT_EQ(s.lr_at(51), 0.1);
}

TEST(LRSchedule, BadConfigsAreErrors) {
  EXPECT_THROW(LRSchedule(config("step", 0, 10)), bb::Error);
  EXPECT_THROW(LRSchedule(config("linear", 10, 10)), bb::Error);  // decay must end after warmup
  EXPECT_THROW(LRSchedule(config("cosine", 10, 0)), bb::Error);
  EXPECT_THROW(LRSchedule(config("linear", -1, 10)), bb::Error);
  EXPECT_NO_THROW(LRSchedule(config("constant", 10, 0)));
  LRScheduleConfig c = config("WSD", 0, 10);
  c.wsd_decay_style = "minus_sqrt";
  try {
    LRSchedule s(c);
    FAIL() << "an unknown WSD tail must fail at construction";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lr_wsd_decay_style 'minus_sqrt'"), std::string::npos) << e.what();
  }
}
