// Random initialisation of a parameter's tensor-parallel shard.
//
// The value of every element is that of drawing the full HF-shaped tensor
// with Generator(seed).fill_normal and slicing it, so every tp layout
// initialises the same model; but each rank draws only its own elements,
// on all host threads, straight into the parameter's dtype (an 8B model no
// longer draws 8B float64 values on every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

// p.value = std * N(0, 1) draws of generator `seed` at the full tensor's flat
// indices of this rank's elements; vocabulary padding rows are zero.
void init_normal_shard(Parameter& p, uint64_t seed, double std);
// init_normal_shard over many parameters with the same values: those too small
// to spread their rows over the host's threads (an MoE layer's experts) are
// drawn side by side, a thread each, in host batches of at most 1 GiB.
struct NormalInit {
  Parameter* p;
  uint64_t seed;
};
void init_normal_shards(const std::vector<NormalInit>& inits, double std);
// InitKind::KaimingUniform: U(-1/sqrt(cols), 1/sqrt(cols)) draws of generator
// `seed` over the full matrix, sliced to this rank's columns (small adapter
// matrices only: the full tensor is drawn on every rank).
void init_kaiming_uniform_shard(Parameter& p, uint64_t seed);

}  // namespace bb
