// The block order of the sm_90a flash attention kernels
// (cutlass/flash_sm90_schedule.h): every block gets its own (unit, tile), a
// section starts every unit's heaviest tile (tile 0) before any unit's next,
// and sections are sized by L2 bytes with a floor of blocks a multiprocessor
// (two, or BB_FLASH_SM90_SECTION_FLOOR). The attention harness on the GPU
// checks the kernels' outputs, but its shapes are small enough to be one
// section; these cover the rest.
#include "bumblebee/ops/cuda/cutlass/flash_sm90_schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "bumblebee/core/error.h"

namespace bb {
namespace {

using cuda::flash_sm90::block_order;
using cuda::flash_sm90::block_unit_tile;
using cuda::flash_sm90::BlockOrder;
using cuda::flash_sm90::kSectionL2Bytes;
using cuda::flash_sm90::section_floor;

constexpr int kMultiprocessors = 132;  // an H100 / H200

// (unit, tile) of every block of `o`, in launch order.
std::vector<std::pair<int, int>> blocks_of(const BlockOrder& o) {
  std::vector<std::pair<int, int>> blocks;
  for (int linear = 0; linear < o.units * o.tiles; ++linear) {
    int unit = -1, tile = -1;
    block_unit_tile(o, linear, unit, tile);
    blocks.emplace_back(unit, tile);
  }
  return blocks;
}

TEST(FlashSm90Schedule, EveryUnitAndTileOnce) {
  for (int units = 1; units <= 40; ++units)
    for (int tiles = 1; tiles <= 33; ++tiles)
      for (int section = 1; section <= units; ++section) {
        const BlockOrder o{units, tiles, section};
        std::vector<int> seen(size_t(units * tiles), 0);
        for (const auto& [unit, tile] : blocks_of(o)) {
          ASSERT_GE(unit, 0);
          ASSERT_LT(unit, units);
          ASSERT_GE(tile, 0);
          ASSERT_LT(tile, tiles);
          ++seen[size_t(unit * tiles + tile)];
        }
        for (int count : seen) ASSERT_EQ(count, 1) << units << " units, " << tiles << " tiles, section " << section;
      }
}

TEST(FlashSm90Schedule, HeaviestTileOfEveryUnitInASectionFirst) {
  // 10 units in sections of 4: units 0-3, 4-7, then the narrower 8-9.
  const BlockOrder o{10, 3, 4};
  const std::vector<std::pair<int, int>> expected = {
      {0, 0}, {1, 0}, {2, 0}, {3, 0}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {0, 2}, {1, 2}, {2, 2}, {3, 2},
      {4, 0}, {5, 0}, {6, 0}, {7, 0}, {4, 1}, {5, 1}, {6, 1}, {7, 1}, {4, 2}, {5, 2}, {6, 2}, {7, 2},
      {8, 0}, {9, 0}, {8, 1}, {9, 1}, {8, 2}, {9, 2},
  };
  EXPECT_EQ(blocks_of(o), expected);
}

TEST(FlashSm90Schedule, SectionsFitL2WithAFloorOfTwoBlocksAMultiprocessor) {
  // Units of 8 MiB: 5 fit in the 40 MiB, but with 32 tiles a unit the floor
  // of 2 x 132 blocks asks for 9 (the backward at 16 / 8 heads, seq 4096).
  EXPECT_EQ(block_order(32, 32, int64_t(8) << 20, kMultiprocessors).section, 9);
  // Units of 2.5 MiB (the 128-head forward of multi-head latent attention): L2 decides.
  EXPECT_EQ(block_order(128, 32, int64_t(5) << 19, kMultiprocessors).section, 16);
  // Fewer units than a section: one section.
  EXPECT_EQ(block_order(8, 32, int64_t(17) << 20, kMultiprocessors).section, 8);
  EXPECT_EQ(block_order(3, 1, 0, kMultiprocessors).section, 3);
  // A unit larger than the L2 share and tiles enough to fill the machine: one unit a section.
  EXPECT_EQ(block_order(4, 2 * kMultiprocessors, 2 * kSectionL2Bytes, kMultiprocessors).section, 1);
  // Other floors: one block a multiprocessor (ceil(132 / 32) = 5 units), one and a half (7).
  EXPECT_EQ(block_order(32, 32, int64_t(8) << 20, kMultiprocessors, 1.0).section, 5);
  EXPECT_EQ(block_order(32, 32, int64_t(8) << 20, kMultiprocessors, 1.5).section, 7);
}

// Sets BB_FLASH_SM90_SECTION_FLOOR for one test and unsets it after.
class SectionFloorEnv : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("BB_FLASH_SM90_SECTION_FLOOR"); }
  static void set(const char* value) { setenv("BB_FLASH_SM90_SECTION_FLOOR", value, 1); }
};

TEST_F(SectionFloorEnv, UnsetOrEmptyIsTwo) {
  unsetenv("BB_FLASH_SM90_SECTION_FLOOR");
  EXPECT_EQ(section_floor(), 2.0);
  set("");
  EXPECT_EQ(section_floor(), 2.0);
}

TEST_F(SectionFloorEnv, TakesAPositiveNumber) {
  set("1.5");
  EXPECT_EQ(section_floor(), 1.5);
  set("64");
  EXPECT_EQ(section_floor(), 64.0);
}

TEST_F(SectionFloorEnv, RejectsWhatIsNotAFloorNamingTheVariable) {
  for (const char* bad : {"0", "-1", "two", "1.5x", "65"}) {
    set(bad);
    try {
      section_floor();
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BB_FLASH_SM90_SECTION_FLOOR is '" + std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace bb
