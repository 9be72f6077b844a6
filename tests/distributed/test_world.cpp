// World in a process started without a launcher: one rank, no MPI.
#include "bumblebee/distributed/world.h"

#include <gtest/gtest.h>

using bb::dist::World;

TEST(World, PlainProcessIsASingleRankWorld) {
  World& w = World::instance();
  EXPECT_EQ(&w, &World::instance());
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.size(), 1);
  EXPECT_EQ(w.local_rank(), 0);
  EXPECT_FALSE(w.uses_mpi());
  EXPECT_EQ(w.launch().launcher, "none");
  EXPECT_EQ(w.comm().size(), 1);
  EXPECT_EQ(w.comm().name(), "world");
}

TEST(World, SplitGivesANamedGroupOfOne) {
  auto g = World::instance().split(3, 0, "tp");
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->name(), "tp");
  EXPECT_THROW(World::instance().split(-1, 0, "bad"), bb::Error);
}
