// RoPE frequency tables.
#include "bumblebee/primitive/modules/rope.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace bb {

void check_rope_config(const RopeConfig& cfg) {
  BB_CHECK(cfg.type == "default" || cfg.type == "llama3" || cfg.type == "yarn", "unsupported rope type '", cfg.type,
           "' (supported: default, llama3, yarn)");
  BB_CHECK(std::isfinite(cfg.theta) && cfg.theta > 0, "rope theta = ", cfg.theta, ": must be a finite number > 0");
  if (cfg.type == "yarn") {
    BB_CHECK(std::isfinite(cfg.factor) && cfg.factor > 0, "yarn rope factor = ", cfg.factor,
             ": must be a finite number > 0");
    BB_CHECK(cfg.beta_fast > 0 && cfg.beta_slow > 0, "yarn rope beta_fast ", cfg.beta_fast, " and beta_slow ",
             cfg.beta_slow, " must be > 0");
    BB_CHECK(cfg.original_max_position_embeddings >= 1, "yarn rope original_max_position_embeddings = ",
             cfg.original_max_position_embeddings, ": must be >= 1");
    return;
  }
  if (cfg.type != "llama3") return;
  for (auto [v, name] : {std::pair{cfg.factor, "factor"}, {cfg.low_freq_factor, "low_freq_factor"},
                         {cfg.high_freq_factor, "high_freq_factor"}})
    BB_CHECK(std::isfinite(v) && v > 0, "llama3 rope ", name, " = ", v, ": must be a finite number > 0");
  BB_CHECK(cfg.high_freq_factor > cfg.low_freq_factor, "llama3 rope high_freq_factor ", cfg.high_freq_factor,
           " must be greater than low_freq_factor ", cfg.low_freq_factor);
  BB_CHECK(cfg.original_max_position_embeddings >= 1, "llama3 rope original_max_position_embeddings = ",
           cfg.original_max_position_embeddings, ": must be >= 1");
}

Tensor rope_inv_freq(const RopeConfig& cfg, int64_t head_dim) {
  check_rope_config(cfg);
  BB_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary embedding needs an even head_dim, got ", head_dim);
  const int64_t half = head_dim / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) f[size_t(i)] = 1.0 / std::pow(cfg.theta, double(2 * i) / double(head_dim));
  if (cfg.type == "llama3") {
    const double old_len = double(cfg.original_max_position_embeddings);
    const double low_wavelen = old_len / cfg.low_freq_factor;
    const double high_wavelen = old_len / cfg.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2.0 * M_PI / x;
      if (wavelen > low_wavelen) {
        x = x / cfg.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor - cfg.low_freq_factor);
        x = (1.0 - smooth) * x / cfg.factor + smooth * x;
      }
    }
  }
  if (cfg.type == "yarn") {
    // HF's find_correction_range and linear_ramp_factor, in double.
    const double dim = double(head_dim), base = cfg.theta;
    const double max_pos = double(cfg.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(max_pos / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
    };
    double low = correction_dim(cfg.beta_fast), high = correction_dim(cfg.beta_slow);
    if (cfg.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;   // HF's inv_freq_extrapolation_factor
      double& x = f[size_t(i)];
      x = x / cfg.factor * (1.0 - extrapolation) + x * extrapolation;
    }
  }
  return Tensor::from_vector(f, {half});
}

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double rope_attention_factor(const RopeConfig& cfg) {
  if (cfg.type != "yarn") return 1.0;
  if (cfg.attention_factor > 0) return cfg.attention_factor;
  if (cfg.mscale != 0 && cfg.mscale_all_dim != 0)
    return yarn_get_mscale(cfg.factor, cfg.mscale) / yarn_get_mscale(cfg.factor, cfg.mscale_all_dim);
  return yarn_get_mscale(cfg.factor, 1.0);
}

}  // namespace bb
