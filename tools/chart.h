// Tools: a log-log line chart drawn on a Canvas and written as PNG.
// x on a log2 axis (sequence lengths), y on a log10 axis; one coloured line per series.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "png.h"

namespace cli {

struct Series {
  std::string name;
  Rgb color;
  std::vector<std::pair<double, double>> points;  // (x, y), both > 0
  bool dashed = false;
};

struct ChartText {
  std::string title, subtitle, x_label, y_label;
};

bool write_loglog_chart(const std::string& path, const ChartText& text,
                        const std::vector<Series>& series);

}  // namespace cli
