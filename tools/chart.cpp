// Tools: a log-log line chart (see chart.h).
#include "chart.h"

#include <algorithm>
#include <cmath>

#include "common.h"

namespace cli {

namespace {

constexpr Rgb kWhite = 0xFFFFFF, kInk = 0x202020, kGrid = 0xDDDDDD, kMinorGrid = 0xF0F0F0;
constexpr int kWidth = 960, kHeight = 620;
constexpr int kLeft = 120, kRight = 40, kTop = 116, kBottom = 84;  // margins around the plot

std::string y_tick(double v) {
  if (v >= 1e4) return fmt("%.0fK", v / 1e3);
  if (v >= 1) return fmt("%.0f", v);
  return fmt("%g", v);
}

// A line of 3-pixel dots in 10-pixel dashes.
void dashed_line(Canvas& c, int x0, int y0, int x1, int y1, Rgb color) {
  const double len = std::hypot(double(x1 - x0), double(y1 - y0));
  for (int k = 0; k <= int(len); ++k) {
    if ((k / 10) % 2) continue;
    const double t = len > 0 ? k / len : 0;
    const int x = int(std::lround(x0 + t * (x1 - x0))), y = int(std::lround(y0 + t * (y1 - y0)));
    c.fill_rect(x - 1, y - 1, x + 1, y + 1, color);
  }
}

}  // namespace

bool write_loglog_chart(const std::string& path, const ChartText& text,
                        const std::vector<Series>& series) {
  double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      if (x <= 0 || y <= 0) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  if (!(xmax > 0) || !(ymax > 0)) return false;
  // Axis ranges: whole powers of two in x, whole decades in y.
  const double lx0 = std::floor(std::log2(xmin)), lx1 = std::max(lx0 + 1, std::ceil(std::log2(xmax)));
  const double ly0 = std::floor(std::log10(ymin)), ly1 = std::max(ly0 + 1, std::ceil(std::log10(ymax)));

  Canvas c(kWidth, kHeight, kWhite);
  const int px0 = kLeft, px1 = kWidth - kRight, py0 = kTop, py1 = kHeight - kBottom;
  auto X = [&](double x) { return px0 + int(std::lround((std::log2(x) - lx0) / (lx1 - lx0) * (px1 - px0))); };
  auto Y = [&](double y) { return py1 - int(std::lround((std::log10(y) - ly0) / (ly1 - ly0) * (py1 - py0))); };

  // Grid and tick labels.
  for (double d = ly0; d <= ly1; ++d) {
    const double v = std::pow(10.0, d);
    for (int m = 2; m <= 9 && d < ly1; ++m) c.line(px0, Y(m * v), px1, Y(m * v), kMinorGrid);
    c.line(px0, Y(v), px1, Y(v), kGrid);
    const std::string label = y_tick(v);
    c.text(px0 - 12 - Canvas::text_width(label), Y(v) - Canvas::text_height() / 2, label, kInk);
  }
  for (double e = lx0; e <= lx1; ++e) {
    const double v = std::exp2(e);
    c.line(X(v), py0, X(v), py1, kGrid);
    const std::string label = human_len(int64_t(v));
    c.text(X(v) - Canvas::text_width(label) / 2, py1 + 12, label, kInk);
  }
  c.line(px0, py1, px1, py1, kInk, 2);  // axes
  c.line(px0, py0, px0, py1, kInk, 2);

  // Titles and axis labels.
  c.text((kWidth - Canvas::text_width(text.title, 3)) / 2, 18, text.title, kInk, 3);
  c.text((kWidth - Canvas::text_width(text.subtitle)) / 2, 52, text.subtitle, 0x555555);
  c.text(16, py0 - 30, text.y_label, kInk);
  c.text((px0 + px1 - Canvas::text_width(text.x_label)) / 2, py1 + 46, text.x_label, kInk);

  // The series: lines with square markers, then a legend in the top-left corner.
  int legend_y = py0 + 14;
  for (const Series& s : series) {
    std::vector<std::pair<int, int>> pts;
    for (auto [x, y] : s.points)
      if (x > 0 && y > 0) pts.emplace_back(X(x), Y(y));
    for (size_t i = 1; i < pts.size(); ++i) {
      if (s.dashed) dashed_line(c, pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second, s.color);
      else c.line(pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second, s.color, 3);
    }
    const int r = s.dashed ? 3 : 4;  // marker half-size
    for (auto [x, y] : pts) c.fill_rect(x - r, y - r, x + r, y + r, s.color);
    if (s.dashed) dashed_line(c, px0 + 16, legend_y + 6, px0 + 46, legend_y + 6, s.color);
    else c.fill_rect(px0 + 16, legend_y + 3, px0 + 46, legend_y + 9, s.color);
    c.text(px0 + 56, legend_y, s.name, kInk);
    legend_y += 24;
  }
  return c.write_png(path);
}

}  // namespace cli
