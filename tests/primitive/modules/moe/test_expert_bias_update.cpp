// expert_bias_step: Megatron's get_updated_expert_bias rule, rate x sign(mean load - load).
// The whole update through a model is tests/model/qwen3_moe/test_qwen3_moe_bias_update.cpp.
#include <gtest/gtest.h>

#include "bumblebee/primitive/modules/moe/expert_bias_update.h"

namespace bb {
namespace {

TEST(ExpertBiasUpdate, StepIsTheSignOfTheGapToTheMean) {
  EXPECT_EQ(expert_bias_step({3, 1, 2, 2}, 0.5), (std::vector<double>{-0.5, 0.5, 0.0, 0.0}));
  EXPECT_EQ(expert_bias_step({0, 0, 0}, 0.25), (std::vector<double>{0.0, 0.0, 0.0}));
}

}  // namespace
}  // namespace bb
