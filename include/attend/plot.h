// Line plots as standalone SVG files that any browser opens: training and validation curves, learning-rate
// schedules, reliability diagrams.
#pragma once

#include <string>
#include <vector>

namespace attend {

struct Series {
  std::string name;            // shown in the legend
  std::vector<double> x, y;    // same length; non-finite points are skipped
  bool markers = false;        // draw a dot at each point (few points), or only the line
};

struct PlotOptions {
  std::string title;
  std::string x_label, y_label;
  bool log_y = false;          // logarithmic y axis (positive values only)
  bool diagonal = false;       // draw y = x (reliability diagrams)
  int width = 800, height = 480;
};

// The SVG document. Throws attend::Error when no series has a finite point.
std::string line_plot_svg(const std::vector<Series>& series, const PlotOptions& options);

}  // namespace attend
