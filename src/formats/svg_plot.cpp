#include <attend/error.h>
#include <attend/plot.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attend {
namespace {

// Tick positions at 1, 2 or 5 × 10^k covering [lo, hi] with about `target` ticks.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string label(double v) { return fmt::format("{:.6g}", v); }

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

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

}  // namespace

std::string line_plot_svg(const std::vector<Series>& series, const PlotOptions& o) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto usable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!o.log_y || y > 0.0); };
  auto ty = [&](double y) { return o.log_y ? std::log10(y) : y; };
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (usable(s.x[i], s.y[i])) {
        x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
        y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
      }
  check(std::isfinite(x0), "plot '{}': no finite points to draw", o.title);
  if (o.diagonal) x0 = y0 = std::min(x0, y0), x1 = y1 = std::max(x1, y1);
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.04 * (y1 - y0);
  y0 -= pad, y1 += pad;

  const double left = 80, right = 20, top = 40, bottom = 60;
  const double W = o.width - left - right, H = o.height - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * W; };
  auto py = [&](double y) { return top + (1.0 - (ty(y) - y0) / (y1 - y0)) * H; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      o.width, o.height, o.width, o.height);
  svg += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n", o.width / 2,
                     escape(o.title));
  // Grid and ticks.
  for (double t : nice_ticks(x0, x1, 8)) {
    const double x = px(t);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n", x, top, x, top + H);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, top + H + 16, label(t));
  }
  for (double t : nice_ticks(y0, y1, 6)) {
    const double y = top + (1.0 - (t - y0) / (y1 - y0)) * H;
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", left, y, left + W, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 6, y + 4,
                       label(o.log_y ? std::pow(10.0, t) : t));
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
                     W, H);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + W / 2, o.height - 18,
                     escape(o.x_label));
  svg += fmt::format("<text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n", top + H / 2,
                     escape(o.y_label));
  if (o.diagonal && !o.log_y)
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#999\" "
                       "stroke-dasharray=\"4 4\"/>\n",
                       px(x0), py(x0), px(x1), py(x1));
  // Series and legend; the legend sits at the top right, as wide as its longest name (about 7 px a character).
  size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  const double legend_x = std::max(left + 10.0, left + W - 40.0 - 7.0 * static_cast<double>(longest));
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* color = kColors[k % std::size(kColors)];
    // A long run has more points than the plot has pixel columns: within a column only its first, lowest,
    // highest and last points are drawn (in their order), which draws the same picture with at most four
    // points a column.
    std::string points;
    std::vector<size_t> column;  // the current column's points, by index
    auto flush = [&] {
      if (column.empty()) return;
      auto by_y = [&](size_t a, size_t b) { return py(s.y[a]) < py(s.y[b]); };
      const size_t lo = *std::min_element(column.begin(), column.end(), by_y);
      const size_t hi = *std::max_element(column.begin(), column.end(), by_y);
      std::vector<size_t> keep = {column.front(), lo, hi, column.back()};
      std::sort(keep.begin(), keep.end());
      keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
      for (size_t i : keep) points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
      column.clear();
    };
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (usable(s.x[i], s.y[i])) {
        if (!column.empty() && std::floor(px(s.x[i])) != std::floor(px(s.x[column.front()]))) flush();
        column.push_back(i);
        if (s.markers)
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(s.x[i]), py(s.y[i]), color);
      }
    flush();
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", color, points);
    const double ly = top + 16 + 18.0 * k;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
                       legend_x, ly, legend_x + 20, ly, color);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", legend_x + 26, ly + 4, escape(s.name));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace attend
