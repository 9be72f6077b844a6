// Counter-based SplitMix64 generator.
#include "bumblebee/core/rng.h"

#include <cmath>
#include <vector>

namespace bb {

uint64_t Generator::next_u64() { return splitmix64(seed_ * 0x632be59bd9b4e019ull + counter_++); }

double Generator::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

namespace {
double box_muller(double u1, double u2) {
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}
}  // namespace

double Generator::normal() {
  const double u1 = uniform();
  return box_muller(u1, uniform());
}

double Generator::normal_at(uint64_t i) const {
  // normal() takes two counters per draw.
  const uint64_t base = seed_ * 0x632be59bd9b4e019ull + 2 * i;
  return box_muller(double(splitmix64(base) >> 11) * 0x1.0p-53, double(splitmix64(base + 1) >> 11) * 0x1.0p-53);
}

void Generator::fill_normal(Tensor& t, double std) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (double& x : v) x = normal() * std;
  t.copy_from(Tensor::from_doubles(v, t.shape(), DType::F64));
}

void Generator::fill_uniform(Tensor& t, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (double& x : v) x = lo + (hi - lo) * uniform();
  t.copy_from(Tensor::from_doubles(v, t.shape(), DType::F64));
}

}  // namespace bb
