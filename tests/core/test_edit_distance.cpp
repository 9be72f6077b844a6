// Levenshtein distance, the basis of "did you mean" suggestions.
#include <gtest/gtest.h>

#include "bumblebee/core/edit_distance.h"

namespace bb {
namespace {

TEST(EditDistance, KnownValues) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("backend.paralel.tp", "backend.parallel.tp"), 1u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
}

}  // namespace
}  // namespace bb
