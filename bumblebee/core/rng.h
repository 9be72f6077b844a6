// Deterministic random numbers for parameter initialisation and tests.
//
// A counter-based generator (SplitMix64 over (seed, counter)) so that the value
// of element i depends only on (seed, i): initialisation is identical across
// platforms, thread counts and tensor-parallel layouts.
#pragma once

#include <cstdint>

#include "bumblebee/core/tensor.h"

namespace bb {

// The SplitMix64 finaliser: a well-mixed 64-bit value of x. Generator draws
// splitmix64(seed * C + counter); the dropout masks (ops/cpu/dropout.cpp and
// its CUDA twin) draw it per element, so any slice can be drawn alone.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Generator {
 public:
  explicit Generator(uint64_t seed) : seed_(seed) {}
  uint64_t next_u64();
  double uniform();                  // [0, 1)
  double normal();                   // standard normal (Box-Muller)
  // The i-th draw of normal() from a fresh generator of this seed, without
  // drawing the ones before it: any slice of a tensor can be drawn alone, by
  // any number of threads, with the values of fill_normal on the whole tensor.
  double normal_at(uint64_t i) const;
  // Fill a tensor (any device, any floating dtype) with N(0, std^2) / U(lo, hi).
  void fill_normal(Tensor& t, double std);
  void fill_uniform(Tensor& t, double lo, double hi);

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

}  // namespace bb
