// RoPE frequency tables.
#include "bumblebee/primitive/modules/rope.h"

#include <cmath>
#include <utility>
#include <vector>

namespace bb {

void check_rope_config(const RopeConfig& cfg) {
  BB_CHECK(cfg.type == "default" || cfg.type == "llama3", "unsupported rope type '", cfg.type,
           "' (supported: default, llama3)");
  BB_CHECK(std::isfinite(cfg.theta) && cfg.theta > 0, "rope theta = ", cfg.theta, ": must be a finite number > 0");
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
  return Tensor::from_vector(f, {half});
}

}  // namespace bb
