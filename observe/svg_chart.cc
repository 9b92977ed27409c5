#include "atoll/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "atoll/printf_string.h"

namespace atl {
namespace {

constexpr double kWidth = 560, kHeight = 320;
constexpr double kLeft = 64, kRight = 16, kTop = 44, kBottom = 44;
constexpr const char* kPalette[] = {"#0969da", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#cf222e", "#57606a",
                                    "#0a3069"};

// A coordinate in the drawing: a tenth of a pixel is fine enough.
std::string coord(double v) { return printf_string("%.1f", v); }

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// At most `n` characters (a panel's width at 14 px bold), the cut marked.
std::string fit(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

// A tick step of 1, 2 or 5 times a power of ten, giving about `n` ticks.
double tick_step(double span, int n) {
  if (!(span > 0)) return 1.0;
  const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string tick_text(double v, double step) {
  const double a = std::fabs(v);
  if (a >= 1e9) return printf_string("%gG", v / 1e9);
  if (a >= 1e6) return printf_string("%gM", v / 1e6);
  if (a >= 1e4) return printf_string("%gk", v / 1e3);
  if (step >= 1) return printf_string("%.0f", v);
  const int digits = std::clamp(static_cast<int>(std::ceil(-std::log10(step))), 0, 6);
  char f[8];
  std::snprintf(f, sizeof f, "%%.%df", digits);
  return printf_string(f, v);
}

template <class Get>
std::optional<std::pair<double, double>> span_of(const std::vector<Chart>& charts, Get get) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& c : charts)
    for (const auto& l : c.lines)
      for (size_t i = 0; i < l.xs.size() && i < l.ys.size(); ++i) {
        if (!std::isfinite(l.xs[i]) || !std::isfinite(l.ys[i])) continue;
        lo = std::min(lo, get(l, i));
        hi = std::max(hi, get(l, i));
      }
  if (!(lo <= hi)) return std::nullopt;
  return std::pair{lo, hi};
}

void panel(std::ostringstream& svg, const Chart& c, double ox, double oy) {
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto xr = c.x_range ? c.x_range : x_span({c});
  auto yr = c.y_range ? c.y_range : y_span({c});
  if (!xr) xr = std::pair{0.0, 1.0};
  if (!yr) yr = std::pair{0.0, 1.0};
  // Plain doubles, not structured bindings: clang 14 cannot capture those in a lambda.
  double x0 = xr->first, x1 = xr->second, y0 = yr->first, y1 = yr->second;
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > y0)) y0 -= 0.5, y1 += 0.5;
  const auto X = [&](double x) { return ox + kLeft + pw * (x - x0) / (x1 - x0); };
  const auto Y = [&](double y) { return oy + kTop + ph * (1 - (y - y0) / (y1 - y0)); };

  svg << "<g class=\"panel\">\n";
  svg << "<text x=\"" << coord(ox + kLeft) << "\" y=\"" << coord(oy + 18)
      << "\" font-size=\"14\" font-weight=\"bold\">" << escape(fit(c.title, 62)) << "</text>\n";
  const double ys = tick_step(y1 - y0, 5), xs = tick_step(x1 - x0, 6);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + ys * 1e-9; y += ys) {
    svg << "<line x1=\"" << coord(X(x0)) << "\" x2=\"" << coord(X(x1)) << "\" y1=\"" << coord(Y(y))
        << "\" y2=\"" << coord(Y(y)) << "\" stroke=\"#eee\"/>\n";
    svg << "<text x=\"" << coord(X(x0) - 6) << "\" y=\"" << coord(Y(y) + 4)
        << "\" text-anchor=\"end\">" << tick_text(y, ys) << "</text>\n";
  }
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + xs * 1e-9; x += xs)
    svg << "<text x=\"" << coord(X(x)) << "\" y=\"" << coord(Y(y0) + 16)
        << "\" text-anchor=\"middle\">" << tick_text(x, xs) << "</text>\n";
  svg << "<text x=\"" << coord(X((x0 + x1) / 2)) << "\" y=\"" << coord(oy + kHeight - 6)
      << "\" text-anchor=\"middle\">" << escape(c.x_label) << "</text>\n";
  svg << "<text transform=\"translate(" << coord(ox + 14) << "," << coord(Y((y0 + y1) / 2))
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(c.y_label) << "</text>\n";
  for (const auto& m : c.marks) {
    if (m.x < x0 || m.x > x1) continue;
    svg << "<line class=\"mark\" x1=\"" << coord(X(m.x)) << "\" x2=\"" << coord(X(m.x)) << "\" y1=\""
        << coord(Y(y1)) << "\" y2=\"" << coord(Y(y0)) << "\" stroke=\"" << m.color
        << "\" stroke-dasharray=\"4,3\"><title>" << escape(m.label) << "</title></line>\n";
    svg << "<text x=\"" << coord(X(m.x) + 2) << "\" y=\"" << coord(Y(y1) + 10) << "\" fill=\"" << m.color
        << "\" font-size=\"9\">" << escape(m.label) << "</text>\n";
  }
  double legend = ox + kLeft + 8;
  int colour = 0;
  for (const auto& l : c.lines) {
    const std::string color = l.color.empty() ? kPalette[colour++ % std::size(kPalette)] : l.color;
    // A point that is not finite is a gap: the line stops there and starts again after it.
    std::string points;
    const auto flush = [&] {
      if (!points.empty())
        svg << "<polyline class=\"line\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.8\" points=\""
            << points << "\"/>\n";
      points.clear();
    };
    for (size_t i = 0; i < l.xs.size() && i < l.ys.size(); ++i) {
      if (!std::isfinite(l.xs[i]) || !std::isfinite(l.ys[i])) {
        flush();
        continue;
      }
      points += coord(X(std::clamp(l.xs[i], x0, x1))) + "," + coord(Y(std::clamp(l.ys[i], y0, y1))) + " ";
    }
    flush();
    if (c.lines.size() > 1 || !l.name.empty()) {
      svg << "<text x=\"" << coord(legend) << "\" y=\"" << coord(oy + 34) << "\" fill=\"" << color
          << "\">" << escape(l.name) << "</text>\n";
      legend += 8.0 * static_cast<double>(l.name.size()) + 16;
    }
  }
  svg << "<rect x=\"" << coord(X(x0)) << "\" y=\"" << coord(Y(y1)) << "\" width=\"" << coord(pw)
      << "\" height=\"" << coord(ph) << "\" fill=\"none\" stroke=\"#888\"/>\n</g>\n";
}

}  // namespace

std::optional<std::pair<double, double>> y_span(const std::vector<Chart>& charts) {
  return span_of(charts, [](const ChartLine& l, size_t i) { return l.ys[i]; });
}

std::optional<std::pair<double, double>> x_span(const std::vector<Chart>& charts) {
  return span_of(charts, [](const ChartLine& l, size_t i) { return l.xs[i]; });
}

std::string svg_charts(const std::vector<Chart>& panels, int columns) {
  const int n = static_cast<int>(panels.size());
  const int cols = columns > 0 ? std::min(columns, std::max(n, 1)) : std::max(n, 1);
  const int rows = (n + cols - 1) / cols;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << cols * kWidth << "\" height=\""
      << std::max(rows, 1) * kHeight << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (int i = 0; i < n; ++i) panel(svg, panels[i], (i % cols) * kWidth, (i / cols) * kHeight);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace atl
