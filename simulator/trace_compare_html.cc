// The HTML form of a comparison: the summary tables and both timelines on one time axis.
#include <algorithm>
#include <sstream>

#include "simulator/trace_compare.h"

namespace parallax {

namespace {

const char* colour(const std::string& name) {
  if (name.rfind("F ", 0) == 0) return "#4e79a7";
  if (name.rfind("B ", 0) == 0) return "#59a14f";
  if (name.rfind("W ", 0) == 0) return "#b6992d";
  if (name.find(" pp") != std::string::npos) return "#f28e2b";
  if (name.find(" dp ") != std::string::npos) return "#b07aa1";
  if (name.find(" tp ") != std::string::npos) return "#e15759";
  return "#79706e";
}

// compare_traces has checked every complete event's fields; skip everything else.
bool complete(const nlohmann::json& e) {
  return e.is_object() && e.contains("ph") && e["ph"].is_string() && e["ph"] == "X";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

// One timeline: a row per process, compute events full height, others in a thin strip below.
std::string timeline_svg(const nlohmann::json& trace, const std::string& title, double span_s) {
  int rows = 0;
  for (const auto& e : trace["traceEvents"])
    if (complete(e)) rows = std::max(rows, e["pid"].get<int>() + 1);
  const double left = 80, width = 1000, row = 28, scale = width / std::max(span_s, 1e-12);
  std::ostringstream svg;
  svg << "<h3>" << escape(title) << "</h3><svg xmlns='http://www.w3.org/2000/svg' width='" << left + width + 10
      << "' height='" << rows * row + 10 << "' font-family='sans-serif' font-size='11'>";
  for (int r = 0; r < rows; ++r) svg << "<text x='2' y='" << r * row + 14 << "'>stage " << r << "</text>";
  for (const auto& e : trace["traceEvents"]) {
    if (!complete(e)) continue;
    const std::string name = e["name"].get<std::string>();
    const bool compute = !e.contains("tid") || !e["tid"].is_number_integer() || e["tid"].get<int64_t>() == 0;
    const double x = left + e["ts"].get<double>() * 1e-6 * scale, w = std::max(0.5, e["dur"].get<double>() * 1e-6 * scale);
    svg << "<rect x='" << x << "' y='" << e["pid"].get<int>() * row + (compute ? 0 : 19) << "' width='" << w
        << "' height='" << (compute ? 17 : 6) << "' fill='" << colour(name) << "'><title>" << escape(name)
        << "</title></rect>";
  }
  svg << "</svg>";
  return svg.str();
}

double span(const nlohmann::json& trace) {
  double end = 0;
  for (const auto& e : trace["traceEvents"])
    if (complete(e)) end = std::max(end, (e["ts"].get<double>() + e["dur"].get<double>()) * 1e-6);
  return end;
}

}  // namespace

std::string comparison_html(const Comparison& c, const nlohmann::json& predicted, const nlohmann::json& measured) {
  const double s = std::max(span(predicted), span(measured));
  std::ostringstream html;
  html << "<!doctype html><html><head><meta charset='utf-8'><title>Parallax: predicted vs measured</title></head>"
       << "<body style='font-family:sans-serif'><h2>Predicted vs measured step</h2><pre>"
       << escape(comparison_markdown(c)) << "</pre>" << timeline_svg(predicted, "predicted (simulate)", s)
       << timeline_svg(measured, "measured (train)", s) << "</body></html>\n";
  return html.str();
}

}  // namespace parallax
