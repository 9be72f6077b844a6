// The deterministic-mode setting: off by default, set and read back.
#include "bumblebee/ops/deterministic.h"

#include <gtest/gtest.h>

namespace bb {
namespace {

TEST(Deterministic, SetAndReadBack) {
  const bool before = ops::deterministic();
  ops::set_deterministic(true);
  EXPECT_TRUE(ops::deterministic());
  ops::set_deterministic(false);
  EXPECT_FALSE(ops::deterministic());
  ops::set_deterministic(before);
}

}  // namespace
}  // namespace bb
