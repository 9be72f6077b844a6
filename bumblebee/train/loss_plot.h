// Loss curves as an SVG image (OUT/loss.svg): lines over step, axes with tick values and labels, a legend.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bb::train {

struct LossCurve {
  std::string label;                              // legend text, e.g. "train"
  std::string color;                              // any SVG color, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;  // (step, loss); non-finite losses are left out
  bool markers = false;                           // a dot at every point (sparse curves such as valid)
};

// Tick positions at 1, 2 or 5 times a power of ten, about `target_count` of
// them, covering [lo, hi] (the first tick <= lo, the last >= hi).
std::vector<double> nice_ticks(double lo, double hi, int target_count);

std::string render_loss_svg(const std::vector<LossCurve>& curves, const std::string& title);

}  // namespace bb::train
