// Rotary position embedding frequencies (HF "default" and "llama3" rope types).
#pragma once

#include <cstdint>
#include <string>

#include "bumblebee/core/tensor.h"

namespace bb {

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";   // "default" or "llama3"
  double factor = 1.0;             // llama3 scaling
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Rejects parameters that would give non-finite or meaningless frequencies:
// theta and the llama3 factors must be finite and > 0, high_freq_factor above
// low_freq_factor, original_max_position_embeddings >= 1, the type known.
void check_rope_config(const RopeConfig& cfg);

// inv_freq[i] = theta^(-2i/D), then the llama3 wavelength-dependent scaling
// when type == "llama3". Float64 host tensor of length D/2, computed in double.
Tensor rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);

}  // namespace bb
