// Axis ticks and the SVG loss plot.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/train/loss_plot.h"

namespace {

using bb::train::LossCurve;
using bb::train::nice_ticks;
using bb::train::render_loss_svg;

TEST(LossPlot, NiceTicksCoverTheRangeAtRoundSteps) {
  EXPECT_EQ(nice_ticks(0, 300, 8), (std::vector<double>{0, 50, 100, 150, 200, 250, 300}));
  const std::vector<double> y = nice_ticks(3.2, 7.7, 6);
  ASSERT_EQ(y.size(), 6u);
  EXPECT_DOUBLE_EQ(y.front(), 3.0);
  EXPECT_DOUBLE_EQ(y.back(), 8.0);
  const std::vector<double> fine = nice_ticks(6.21, 6.93, 6);   // spacing 0.1
  EXPECT_NEAR(fine.front(), 6.2, 1e-12);
  EXPECT_NEAR(fine.back(), 7.0, 1e-12);
  EXPECT_EQ(fine.size(), 9u);
  // One value: a window around it rather than a division by zero.
  const std::vector<double> one = nice_ticks(5, 5, 6);
  EXPECT_LE(one.front(), 5);
  EXPECT_GE(one.back(), 5);
  EXPECT_GT(one.size(), 1u);
}

TEST(LossPlot, SvgHasCurvesAxesAndLegend) {
  LossCurve train{"train", "#1f77b4", {}, false};
  for (int s = 1; s <= 300; ++s) train.points.emplace_back(s, 7.6 - 3.0 * s / 300.0);
  train.points.emplace_back(301, NAN);   // a diverged step is left out, not drawn
  LossCurve valid{"valid", "#ff7f0e", {{100, 6.0}, {200, 5.2}, {300, 4.9}}, true};
  const std::string svg = render_loss_svg({train, valid}, "run <a&b>");
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_NE(svg.find("run &lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">300</text>"), std::string::npos);   // x tick
  EXPECT_NE(svg.find(">4.5</text>"), std::string::npos);   // y tick
  EXPECT_NE(svg.find(">train</text>"), std::string::npos);
  EXPECT_NE(svg.find(">valid</text>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  size_t polylines = 0, circles = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  EXPECT_EQ(polylines, 2u);
  EXPECT_EQ(circles, 3u);
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
}

}  // namespace
