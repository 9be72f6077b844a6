// SVG rendering of loss curves with "nice" axis ticks.
#include "bumblebee/train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace bb::train {

namespace {

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 75, kRight = 25, kTop = 45, kBottom = 60;

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A tick value with as many decimals as the tick spacing needs.
std::string tick_label(double v, double spacing) {
  const int decimals = std::max(0, int(-std::floor(std::log10(spacing) + 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(v) < spacing * 1e-9 ? 0.0 : v);
  return buf;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target_count) {
  if (!(hi > lo)) {   // one value (or none): a unit-wide window around it
    const double c = std::isfinite(lo) ? lo : 0.0;
    lo = c - 0.5;
    hi = c + 0.5;
  }
  const double raw = (hi - lo) / std::max(target_count, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double spacing = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  std::vector<double> ticks;
  const double first = std::floor(lo / spacing + 1e-9), last = std::ceil(hi / spacing - 1e-9);
  for (double k = first; k <= last + 0.5; k += 1) ticks.push_back(k * spacing);
  return ticks;
}

std::string render_loss_svg(const std::vector<LossCurve>& curves, const std::string& title) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const LossCurve& c : curves)
    for (const auto& [x, y] : c.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  if (!std::isfinite(x_lo)) x_lo = x_hi = y_lo = y_hi = 0;
  x_lo = std::min(x_lo, 0.0);
  const std::vector<double> xt = nice_ticks(x_lo, x_hi, 8), yt = nice_ticks(y_lo, y_hi, 6);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - (y - y0) / (y1 - y0) * plot_h; };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", kWidth) + "\" height=\"" +
       fmt("%.0f", kHeight) + "\" viewBox=\"0 0 " + fmt("%.0f", kWidth) + " " + fmt("%.0f", kHeight) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt("%.1f", kWidth / 2) + "\" y=\"25\" text-anchor=\"middle\" font-size=\"15\">" +
       xml_escape(title) + "</text>\n";
  const double x_spacing = xt.size() > 1 ? xt[1] - xt[0] : 1, y_spacing = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double x : xt) {
    s += "<line x1=\"" + fmt("%.1f", px(x)) + "\" y1=\"" + fmt("%.1f", kTop) + "\" x2=\"" + fmt("%.1f", px(x)) +
         "\" y2=\"" + fmt("%.1f", kTop + plot_h) + "\" stroke=\"#e5e5e5\"/>\n";
    s += "<text x=\"" + fmt("%.1f", px(x)) + "\" y=\"" + fmt("%.1f", kTop + plot_h + 18) +
         "\" text-anchor=\"middle\">" + tick_label(x, x_spacing) + "</text>\n";
  }
  for (double y : yt) {
    s += "<line x1=\"" + fmt("%.1f", kLeft) + "\" y1=\"" + fmt("%.1f", py(y)) + "\" x2=\"" +
         fmt("%.1f", kLeft + plot_w) + "\" y2=\"" + fmt("%.1f", py(y)) + "\" stroke=\"#e5e5e5\"/>\n";
    s += "<text x=\"" + fmt("%.1f", kLeft - 8) + "\" y=\"" + fmt("%.1f", py(y) + 4) + "\" text-anchor=\"end\">" +
         tick_label(y, y_spacing) + "</text>\n";
  }
  s += "<rect x=\"" + fmt("%.1f", kLeft) + "\" y=\"" + fmt("%.1f", kTop) + "\" width=\"" + fmt("%.1f", plot_w) +
       "\" height=\"" + fmt("%.1f", plot_h) + "\" fill=\"none\" stroke=\"black\"/>\n";
  s += "<text x=\"" + fmt("%.1f", kLeft + plot_w / 2) + "\" y=\"" + fmt("%.1f", kHeight - 15) +
       "\" text-anchor=\"middle\" font-size=\"13\">step</text>\n";
  s += "<text transform=\"translate(20," + fmt("%.1f", kTop + plot_h / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">loss</text>\n";

  double legend_y = kTop + 18;
  for (const LossCurve& c : curves) {
    std::string pts;
    for (const auto& [x, y] : c.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      pts += fmt("%.1f", px(x)) + "," + fmt("%.1f", py(y)) + " ";
      if (c.markers)
        s += "<circle cx=\"" + fmt("%.1f", px(x)) + "\" cy=\"" + fmt("%.1f", py(y)) + "\" r=\"3\" fill=\"" +
             xml_escape(c.color) + "\"/>\n";
    }
    s += "<polyline fill=\"none\" stroke=\"" + xml_escape(c.color) + "\" stroke-width=\"1.5\" points=\"" + pts +
         "\"/>\n";
    const double lx = kLeft + plot_w - 110;
    s += "<line x1=\"" + fmt("%.1f", lx) + "\" y1=\"" + fmt("%.1f", legend_y - 4) + "\" x2=\"" + fmt("%.1f", lx + 24) +
         "\" y2=\"" + fmt("%.1f", legend_y - 4) + "\" stroke=\"" + xml_escape(c.color) + "\" stroke-width=\"2\"/>\n";
    s += "<text x=\"" + fmt("%.1f", lx + 30) + "\" y=\"" + fmt("%.1f", legend_y) + "\">" + xml_escape(c.label) +
         "</text>\n";
    legend_y += 18;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace bb::train
