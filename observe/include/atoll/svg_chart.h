// SvgChart: line charts as SVG text, with no plotting dependency.
//
//   Chart c;
//   c.title = "training loss";  c.x_label = "tokens";
//   c.lines.push_back({"decoupled", "", xs, ys});
//   write_file("loss.svg", svg_charts({c}));
//
// Axes span the data (or the given ranges) with round ticks; marks are
// vertical dashed lines (faults, restarts) labelled at the top. Several
// panels go side by side in one picture; give them the same ranges to
// compare them on the same axes.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace atl {

struct ChartLine {
  std::string name;
  std::string color;  // empty: the palette's next colour
  std::vector<double> xs, ys;  // same length; non-finite points are skipped
};

struct ChartMark {
  double x = 0.0;
  std::string label;  // short: "kill 2"
  std::string color = "#cf222e";
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<ChartLine> lines;
  std::vector<ChartMark> marks;
  std::optional<std::pair<double, double>> x_range, y_range;  // default: the data's
};

// The panels in a grid of `columns` (0: all in one row), each 560 x 320.
std::string svg_charts(const std::vector<Chart>& panels, int columns = 0);

// The smallest and largest finite y (or x) over the charts' lines; nullopt if none.
std::optional<std::pair<double, double>> y_span(const std::vector<Chart>& charts);
std::optional<std::pair<double, double>> x_span(const std::vector<Chart>& charts);

}  // namespace atl
