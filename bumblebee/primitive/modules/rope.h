// Rotary position embedding frequencies (HF "default", "llama3" and "yarn" rope types).
#pragma once

#include <cstdint>
#include <string>

#include "bumblebee/core/tensor.h"

namespace bb {

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";   // "default", "llama3" or "yarn"
  double factor = 1.0;             // llama3 scaling
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // yarn (HF's _compute_yarn_parameters; `factor` above is its scale):
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;   // 0: absent
  double attention_factor = 0.0;               // 0: absent, derived from mscale / mscale_all_dim
  bool truncate = true;
};

// HF's yarn_get_mscale: 0.1 mscale ln(scale) + 1, or 1 for scale <= 1.
double yarn_get_mscale(double scale, double mscale);

// The factor HF multiplies cos and sin by: 1 except for yarn, where it is
// attention_factor when given, else get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are set, else get_mscale(factor).
double rope_attention_factor(const RopeConfig& cfg);

// Rejects parameters that would give non-finite or meaningless frequencies:
// theta and the llama3 factors must be finite and > 0, high_freq_factor above
// low_freq_factor, original_max_position_embeddings >= 1, the type known.
void check_rope_config(const RopeConfig& cfg);

// inv_freq[i] = theta^(-2i/D), then the llama3 wavelength-dependent scaling
// when type == "llama3", or yarn's blend of interpolated and extrapolated
// frequencies over its correction range when type == "yarn". Float64 host tensor of length D/2, computed in double.
Tensor rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);

}  // namespace bb
