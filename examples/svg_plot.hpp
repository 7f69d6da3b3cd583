#pragma once
// Minimal SVG figures for the physics examples (no plotting dependency): a line plot, a
// stick spectrum and heat maps. Each call writes one self-contained .svg file that any
// browser shows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace svg_plot {

struct Frame {  // a plot area inside the figure, and the data range it maps
  double x0, y0, w, h;           // pixels
  double xmin, xmax, ymin, ymax;  // data
  double px(double x) const { return x0 + (x - xmin) / (xmax - xmin) * w; }
  double py(double y) const { return y0 + h - (y - ymin) / (ymax - ymin) * h; }
};

inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// A round tick spacing (1, 2 or 5 times a power of ten) giving about four ticks over span.
inline double tick_step(double span) {
  double raw = span / 4, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

// Axes, round ticks and labels of a frame; logy: y holds log10 values, labelled 1e-6 etc.
inline void axes(std::ostringstream& s, const Frame& f, const std::string& xlabel, const std::string& ylabel,
                 bool logy = false) {
  s << "<rect x='" << f.x0 << "' y='" << f.y0 << "' width='" << f.w << "' height='" << f.h
    << "' fill='none' stroke='#333'/>\n";
  const double xs = tick_step(f.xmax - f.xmin), ys = logy ? std::max(1.0, std::round(tick_step(f.ymax - f.ymin)))
                                                          : tick_step(f.ymax - f.ymin);
  for (double xv = std::ceil(f.xmin / xs) * xs; xv <= f.xmax + 1e-9 * xs; xv += xs) {
    double X = f.px(xv);
    s << "<line x1='" << X << "' y1='" << f.y0 + f.h << "' x2='" << X << "' y2='" << f.y0 + f.h + 5 << "' stroke='#333'/>"
      << "<text x='" << X << "' y='" << f.y0 + f.h + 18 << "' font-size='11' text-anchor='middle'>" << num(xv) << "</text>\n";
  }
  for (double yv = std::ceil(f.ymin / ys) * ys; yv <= f.ymax + 1e-9 * ys; yv += ys) {
    double Y = f.py(yv);
    char b[32];
    if (logy)
      std::snprintf(b, sizeof b, "1e%d", static_cast<int>(std::lround(yv)));
    else
      std::snprintf(b, sizeof b, "%.4g", std::abs(yv) < 1e-12 * ys ? 0.0 : yv);
    s << "<line x1='" << f.x0 - 5 << "' y1='" << Y << "' x2='" << f.x0 << "' y2='" << Y << "' stroke='#333'/>"
      << "<text x='" << f.x0 - 8 << "' y='" << Y + 4 << "' font-size='11' text-anchor='end'>" << b << "</text>\n";
  }
  s << "<text x='" << f.x0 + f.w / 2 << "' y='" << f.y0 + f.h + 38 << "' font-size='13' text-anchor='middle'>" << xlabel
    << "</text>\n";
  s << "<text transform='translate(" << f.x0 - 58 << "," << f.y0 + f.h / 2
    << ") rotate(-90)' font-size='13' text-anchor='middle'>" << ylabel << "</text>\n";
}

inline void write(const std::string& path, const std::string& body, double width, double height) {
  std::ofstream out(path);
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
      << body << "</svg>\n";
}

inline void title(std::ostringstream& s, double x, const std::string& t) {
  s << "<text x='" << x << "' y='24' font-size='15' text-anchor='middle'>" << t << "</text>\n";
}

// y(x) as a polyline; logy plots log10(y) (y must then be positive).
inline void line_plot(const std::string& path, const std::string& t, const std::string& xlabel,
                      const std::string& ylabel, const std::vector<double>& x, std::vector<double> y, bool logy = false) {
  if (logy)
    for (auto& v : y) v = std::log10(std::max(v, 1e-300));
  auto [ymin, ymax] = std::minmax_element(y.begin(), y.end());
  double lo = *ymin, hi = *ymax;
  if (hi - lo < 1e-12) hi = lo + 1;
  double pad = 0.05 * (hi - lo);
  Frame f{90, 40, 510, 300, x.front(), x.back() > x.front() ? x.back() : x.front() + 1, lo - pad, hi + pad};
  std::ostringstream s;
  title(s, 340, t);
  axes(s, f, xlabel, ylabel, logy);
  s << "<polyline fill='none' stroke='#1f77b4' stroke-width='2' points='";
  for (size_t i = 0; i < x.size(); ++i) s << f.px(x[i]) << "," << f.py(y[i]) << " ";
  s << "'/>\n";
  write(path, s.str(), 640, 400);
}

// A stick spectrum: one stick per distinct position (within tol), as high as the number of
// values there (the degeneracy); sticks below zero_below in grey (zero modes).
inline void stick_plot(const std::string& path, const std::string& t, const std::string& xlabel,
                       std::vector<double> x, double zero_below, double tol) {
  std::sort(x.begin(), x.end());
  std::vector<std::pair<double, int>> sticks;
  for (double v : x) {
    if (!sticks.empty() && v - sticks.back().first <= tol)
      ++sticks.back().second;
    else
      sticks.push_back({v, 1});
  }
  int most = 1;
  for (auto& st : sticks) most = std::max(most, st.second);
  Frame f{80, 40, 520, 260, -0.03 * x.back(), x.back() * 1.05 + 1e-9, 0, most + 0.5};  // room for the zero modes
  std::ostringstream s;
  title(s, 340, t);
  axes(s, f, xlabel, "degeneracy");
  for (auto [v, k] : sticks) {
    const char* colour = v < zero_below ? "#999" : "#d62728";
    s << "<line x1='" << f.px(v) << "' y1='" << f.py(0) << "' x2='" << f.px(v) << "' y2='" << f.py(k)
      << "' stroke='" << colour << "' stroke-width='3'/>\n";
  }
  write(path, s.str(), 640, 360);
}

// Colour of t in [0, 1] on a blue-white-red scale.
inline std::string colour(double t) {
  t = std::clamp(t, 0.0, 1.0);
  int r, g, b;
  if (t < 0.5) {
    double u = t / 0.5;
    r = int(59 + u * (247 - 59)), g = int(76 + u * (247 - 76)), b = int(192 + u * (247 - 192));
  } else {
    double u = (t - 0.5) / 0.5;
    r = int(247 + u * (180 - 247)), g = int(247 + u * (4 - 247)), b = int(247 + u * (38 - 247));
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// Heat maps side by side: each panel is n x n values (row i = y index, column j = x index)
// over the unit square, with its own colour range.
inline void heatmaps(const std::string& path, const std::vector<std::pair<std::string, std::vector<double>>>& panels,
                     int n) {
  std::ostringstream s;
  const double size = 280, gap = 120;
  for (size_t p = 0; p < panels.size(); ++p) {
    const auto& [name, v] = panels[p];
    auto [mn, mx] = std::minmax_element(v.begin(), v.end());
    double lo = *mn, hi = *mx > *mn ? *mx : *mn + 1;
    if (lo < 0 && hi > 0) hi = std::max(hi, -lo), lo = -hi;  // signed data: white is zero
    Frame f{70 + p * (size + gap), 40, size, size, 0, 1, 0, 1};
    title(s, f.x0 + size / 2, name);
    double cell = size / n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        s << "<rect x='" << f.x0 + j * cell << "' y='" << f.y0 + size - (i + 1) * cell << "' width='" << cell + 0.5
          << "' height='" << cell + 0.5 << "' fill='" << colour((v[i * n + j] - lo) / (hi - lo)) << "'/>\n";
    axes(s, f, "x", "y");
    for (int k = 0; k <= 10; ++k) {  // colour bar
      double t = k / 10.0;
      s << "<rect x='" << f.x0 + size + 12 << "' y='" << f.y0 + size - (k + 1) * size / 11 << "' width='14' height='"
        << size / 11 + 0.5 << "' fill='" << colour(t) << "'/>";
    }
    s << "<text x='" << f.x0 + size + 30 << "' y='" << f.y0 + 10 << "' font-size='10'>" << num(hi) << "</text>"
      << "<text x='" << f.x0 + size + 30 << "' y='" << f.y0 + size << "' font-size='10'>" << num(lo) << "</text>\n";
  }
  write(path, s.str(), panels.size() * (size + gap) + 40, size + 100);
}

}  // namespace svg_plot
