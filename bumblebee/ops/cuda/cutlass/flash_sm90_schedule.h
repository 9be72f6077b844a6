// The order in which the sm_90a flash attention kernels (forward and
// backward) start their blocks: a one-dimensional grid over units (a head of
// one sequence: a query head in the forward, a kv head in the backward)
// times tiles (the 128 query rows or keys one block owns).
//
// Blocks start in linear order as multiprocessors free up. Under the causal
// mask the tiles differ in work up to 64-fold, so the heaviest tiles of every
// unit should start first and the lightest last (longest processing time
// first), or a heavy block that starts late ends the kernel alone. But the
// blocks of one unit share what they stream (K and V in the forward; Q, dO
// and the dQ sums in the backward), which stays in L2 only while few units
// run at once. So the units are cut into sections, and inside a section the
// tile is the slow index and the unit the fast one (FlashAttention-3's
// scheduler for its backward does the same). A section holds the units whose
// shared bytes fit in part of L2, but at least two blocks a multiprocessor
// (BB_FLASH_SM90_SECTION_FLOOR): with fewer, the next section's heavy tiles
// start late. On an H200 (causal,
// seq 4096) the order took the backward at one sequence of 16 / 8 heads from
// 313 to 444 TFLOP/s, and sections took the 128-head forward of multi-head
// latent attention from 487 back to 645 (benchmarks/RESULTS.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "bumblebee/core/error.h"

namespace bb::cuda::flash_sm90 {

// The L2 bytes a section's shared tensors may take (of the H100 / H200's 50 MB).
constexpr int64_t kSectionL2Bytes = int64_t(40) << 20;
// The blocks a multiprocessor a section holds at least, unless
// BB_FLASH_SM90_SECTION_FLOOR says otherwise (section_floor).
constexpr double kSectionFloor = 2.0;

// BB_FLASH_SM90_SECTION_FLOOR (read at every launch): the floor in blocks a
// multiprocessor, a number in (0, 64]; unset or empty means kSectionFloor.
// Between one and two the best value is not yet measured (benchmarks/NOTES.md).
inline double section_floor() {
  const char* env = std::getenv("BB_FLASH_SM90_SECTION_FLOOR");
  if (env == nullptr || *env == '\0') return kSectionFloor;
  char* end = nullptr;
  const double blocks = std::strtod(env, &end);
  BB_CHECK(*end == '\0' && blocks > 0 && blocks <= 64, "BB_FLASH_SM90_SECTION_FLOOR is '", env,
           "'; it must be a number of blocks a multiprocessor in (0, 64]");
  return blocks;
}

struct BlockOrder {
  int units;     // heads x sequences
  int tiles;     // tiles a unit (the longest sequence's)
  int section;   // units a section
};

// The order of units x tiles blocks whose units each share `unit_bytes`, on
// a device of `multiprocessors`, sections of at least `floor_blocks` blocks a
// multiprocessor.
inline BlockOrder block_order(int units, int tiles, int64_t unit_bytes, int multiprocessors,
                              double floor_blocks = kSectionFloor) {
  const int64_t fit = kSectionL2Bytes / std::max<int64_t>(unit_bytes, 1);
  const int64_t busy = int64_t(std::ceil(floor_blocks * multiprocessors / std::max(tiles, 1)));
  return {units, tiles, int(std::clamp<int64_t>(std::max(fit, busy), 1, std::max(units, 1)))};
}

// The unit and tile of block `linear`, tile 0 first within each section.
// Plain constexpr C++, so the kernels call it (nvcc's --expt-relaxed-constexpr)
// and the CPU tests check it (tests/ops/test_flash_sm90_schedule.cpp).
constexpr void block_unit_tile(const BlockOrder& o, int linear, int& unit, int& tile) {
  const int per_section = o.section * o.tiles;
  const int first_unit = linear / per_section * o.section;
  const int rest = linear % per_section;
  const int left = o.units - first_unit;
  const int width = o.section < left ? o.section : left;  // the last section may be narrower
  tile = rest / width;
  unit = first_unit + rest % width;
}

}  // namespace bb::cuda::flash_sm90
