// Small building blocks of the self-contained HTML pages (`planner --html`, `compare --html`):
// escaping, HTML tables, and SVG axes with ticks and a legend. Header-only so that both the
// simulator library (compare's page) and the tools (the planner's report) use one copy without a
// new library; every page is inline SVG, no script, no external font or file.
#pragma once

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace parallax::html {

inline std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A number for SVG coordinates and tick labels: up to 4 significant digits, no exponent for
// the ranges these charts draw.
inline std::string num(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", v);
  return buffer;
}

// A tick spacing of 1, 2 or 5 x 10^k giving about 4-8 ticks over `span`.
inline double tick_step(double span) {
  if (!(span > 0)) return 1;
  const double raw = span / 6, power = std::pow(10.0, std::floor(std::log10(raw)));
  const double unit = raw / power;
  return power * (unit < 1.5 ? 1 : unit < 3.5 ? 2 : unit < 7.5 ? 5 : 10);
}

// <table class='cls'> with a header row; cells are escaped.
inline std::string table(const std::string& cls, const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows) {
  std::ostringstream o;
  o << "<table class='" << cls << "'><thead><tr>";
  for (const std::string& h : header) o << "<th>" << escape(h) << "</th>";
  o << "</tr></thead><tbody>\n";
  for (const auto& row : rows) {
    o << "<tr>";
    for (const std::string& cell : row) o << "<td>" << escape(cell) << "</td>";
    o << "</tr>\n";
  }
  o << "</tbody></table>\n";
  return o.str();
}

// A plot area: data (x0..x1, y0..y1) mapped onto the pixel box (left, top, width, height).
struct Frame {
  double left, top, width, height;
  double x0, x1, y0, y1;
  double x(double v) const { return left + (v - x0) / (x1 - x0) * width; }
  double y(double v) const { return top + height - (v - y0) / (y1 - y0) * height; }
};

// Both axes with ticks, tick labels ("<value> <unit>" after scaling by *_scale) and titles.
inline std::string axes(const Frame& f, const std::string& x_title, const std::string& y_title, double x_scale = 1,
                        double y_scale = 1) {
  std::ostringstream o;
  const double bottom = f.top + f.height;
  o << "<g class='axis x-axis'><line x1='" << f.left << "' y1='" << bottom << "' x2='" << f.left + f.width << "' y2='"
    << bottom << "' stroke='black'/>";
  const double xs = tick_step(f.x1 - f.x0);
  for (double t = std::ceil(f.x0 / xs) * xs; t <= f.x1 + 1e-9 * xs; t += xs)
    o << "<line x1='" << num(f.x(t)) << "' y1='" << bottom << "' x2='" << num(f.x(t)) << "' y2='" << bottom + 4
      << "' stroke='black'/><text x='" << num(f.x(t)) << "' y='" << bottom + 16 << "' text-anchor='middle'>"
      << num(t * x_scale) << "</text>";
  o << "<text class='axis-title' x='" << f.left + f.width / 2 << "' y='" << bottom + 34 << "' text-anchor='middle'>"
    << escape(x_title) << "</text></g>\n<g class='axis y-axis'><line x1='" << f.left << "' y1='" << f.top << "' x2='"
    << f.left << "' y2='" << bottom << "' stroke='black'/>";
  const double ys = tick_step(f.y1 - f.y0);
  for (double t = std::ceil(f.y0 / ys) * ys; t <= f.y1 + 1e-9 * ys; t += ys)
    o << "<line x1='" << f.left - 4 << "' y1='" << num(f.y(t)) << "' x2='" << f.left << "' y2='" << num(f.y(t))
      << "' stroke='black'/><text x='" << f.left - 6 << "' y='" << num(f.y(t) + 4) << "' text-anchor='end'>"
      << num(t * y_scale) << "</text>";
  o << "<text class='axis-title' transform='translate(" << f.left - 48 << "," << f.top + f.height / 2
    << ") rotate(-90)' text-anchor='middle'>" << escape(y_title) << "</text></g>\n";
  return o.str();
}

// A legend of coloured squares in one row starting at (x, y); entries are {label, colour}.
inline std::string legend(double x, double y, const std::vector<std::pair<std::string, std::string>>& entries) {
  std::ostringstream o;
  o << "<g class='legend'>";
  for (const auto& [label, colour] : entries) {
    o << "<rect x='" << x << "' y='" << y - 9 << "' width='10' height='10' fill='" << colour << "'/><text x='" << x + 14
      << "' y='" << y << "'>" << escape(label) << "</text>";
    x += 24 + 7 * static_cast<double>(label.size());
  }
  o << "</g>\n";
  return o.str();
}

// The page around the body: UTF-8, a title, a small inline style sheet.
inline std::string page(const std::string& title, const std::string& body) {
  return "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>" + escape(title) +
         "</title>\n<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:0.5em 0}"
         "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}"
         "td:first-child,th:first-child{text-align:left}svg{display:block;margin:0.5em 0}</style></head>\n<body>\n" +
         body + "</body></html>\n";
}

}  // namespace parallax::html
