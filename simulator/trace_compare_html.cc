// The HTML form of a comparison: the summary and per-kind tables as HTML tables, a bar chart of
// the per-kind median op times, and both timelines on one time axis, each chart with a title,
// axes with units and a legend. Self-contained: inline SVG, no script.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "simulator/html_chart.h"
#include "simulator/trace_compare.h"

namespace parallax {

namespace {

// Timeline colours by event name, as simulate --svg colours its classes.
const std::vector<std::pair<std::string, std::string>> kTimelineLegend = {
    {"F (forward)", "#4e79a7"}, {"B (backward)", "#59a14f"}, {"W (weight grad)", "#b6992d"},
    {"PP transfer", "#f28e2b"}, {"DP collective", "#b07aa1"}, {"TP collective", "#e15759"},
    {"optimizer, other", "#79706e"}};

const std::string& colour(const std::string& name) {
  size_t k = 6;
  if (name.rfind("F ", 0) == 0) k = 0;
  else if (name.rfind("B ", 0) == 0) k = 1;
  else if (name.rfind("W ", 0) == 0) k = 2;
  else if (name.find(" pp") != std::string::npos) k = 3;
  else if (name.find(" dp") != std::string::npos) k = 4;
  else if (name.find("tp ") != std::string::npos) k = 5;
  return kTimelineLegend[k].second;
}

// compare_traces has checked every complete event's fields; skip everything else.
bool complete(const nlohmann::json& e) {
  return e.is_object() && e.contains("ph") && e["ph"].is_string() && e["ph"] == "X";
}

std::string fmt(const char* format, double v) {
  char b[48];
  std::snprintf(b, sizeof b, format, v);
  return b;
}
std::string pct(double x) { return fmt("%+.1f%%", 100 * x); }

// One timeline: a row per process, compute events full height, others in a thin strip below;
// the x axis in milliseconds over `span_s`, shared by both timelines so they line up.
std::string timeline_svg(const nlohmann::json& trace, const std::string& id, const std::string& title, double span_s) {
  int rows = 0;
  for (const auto& e : trace["traceEvents"])
    if (complete(e)) rows = std::max(rows, e["pid"].get<int>() + 1);
  const double row = 28;
  const html::Frame f{80, 30, 1000, std::max(1, rows) * row, 0, std::max(span_s, 1e-12), 0, 1};
  std::ostringstream svg;
  svg << "<svg id='" << id << "' class='chart timeline' xmlns='http://www.w3.org/2000/svg' width='1100' height='"
      << f.top + f.height + 70 << "' font-family='sans-serif' font-size='11'><text class='chart-title' x='"
      << f.left << "' y='18' font-size='13'>" << html::escape(title) << "</text>";
  for (int r = 0; r < rows; ++r) svg << "<text x='2' y='" << f.top + r * row + 14 << "'>stage " << r << "</text>";
  for (const auto& e : trace["traceEvents"]) {
    if (!complete(e)) continue;
    const std::string name = e["name"].get<std::string>();
    const bool compute = !e.contains("tid") || !e["tid"].is_number_integer() || e["tid"].get<int64_t>() == 0;
    const double x = f.x(e["ts"].get<double>() * 1e-6), w = std::max(0.5, f.x(e["dur"].get<double>() * 1e-6) - f.left);
    svg << "<rect x='" << html::num(x) << "' y='" << f.top + e["pid"].get<int>() * row + (compute ? 0 : 19)
        << "' width='" << html::num(w) << "' height='" << (compute ? 17 : 6) << "' fill='" << colour(name)
        << "'><title>" << html::escape(name) << "</title></rect>";
  }
  // The y axis of a timeline is the stage rows: draw only the time axis and its title.
  const std::string axes = html::axes(f, "time in the step (ms)", "", 1e3, 1);
  svg << axes.substr(0, axes.find("<g class='axis y-axis'>"))
      << html::legend(f.left, f.top + f.height + 58, kTimelineLegend) << "</svg>\n";
  return svg.str();
}

double span(const nlohmann::json& trace) {
  double end = 0;
  for (const auto& e : trace["traceEvents"])
    if (complete(e)) end = std::max(end, (e["ts"].get<double>() + e["dur"].get<double>()) * 1e-6);
  return end;
}

// Predicted beside measured median duration of each op kind, in milliseconds.
std::string kinds_svg(const std::vector<KindSummary>& kinds) {
  double top_s = 0;
  for (const KindSummary& k : kinds) top_s = std::max({top_s, k.predicted_median_s, k.measured_median_s});
  const double slot = 70;
  const html::Frame f{80, 30, std::max<double>(1, static_cast<double>(kinds.size())) * slot, 220, 0, 1, 0,
                      top_s > 0 ? top_s * 1.1 : 1};
  std::ostringstream svg;
  svg << "<svg id='kind-chart' class='chart bars' xmlns='http://www.w3.org/2000/svg' width='" << f.left + f.width + 40
      << "' height='" << f.top + f.height + 80 << "' font-family='sans-serif' font-size='11'><text class='chart-title' x='"
      << f.left << "' y='18' font-size='13'>Median op time by kind: predicted vs measured</text>";
  for (size_t i = 0; i < kinds.size(); ++i) {
    const double x = f.left + static_cast<double>(i) * slot + 10;
    int side = 0;
    for (const auto& [value, fill] : {std::pair{kinds[i].predicted_median_s, "#4e79a7"}, {kinds[i].measured_median_s, "#f28e2b"}}) {
      svg << "<rect x='" << x + 25 * side << "' y='" << html::num(f.y(value)) << "' width='24' height='"
          << html::num(f.top + f.height - f.y(value)) << "' fill='" << fill << "'><title>" << html::escape(kinds[i].kind)
          << (side ? " measured " : " predicted ") << fmt("%.6g", value) << " s</title></rect>";
      ++side;
    }
    svg << "<text x='" << x + 24 << "' y='" << f.top + f.height + 14 << "' text-anchor='middle'>"
        << html::escape(kinds[i].kind) << "</text>";
  }
  const std::string axes = html::axes(f, "", "median op time (ms)", 1, 1e3);
  svg << axes.substr(axes.find("<g class='axis y-axis'>"))
      << "<line x1='" << f.left << "' y1='" << f.top + f.height << "' x2='" << f.left + f.width << "' y2='"
      << f.top + f.height << "' stroke='black'/>"
      << html::legend(f.left, f.top + f.height + 40, {{"predicted (simulate)", "#4e79a7"}, {"measured (train)", "#f28e2b"}})
      << "</svg>\n";
  return svg.str();
}

std::string summary_tables(const Comparison& c) {
  const TraceSummary &p = c.predicted, &m = c.measured;
  std::vector<std::vector<std::string>> rows = {
      {"step time (s)", fmt("%.6g", p.step_time_s), fmt("%.6g", m.step_time_s), pct(relative_error(p.step_time_s, m.step_time_s))},
      {"bubble", fmt("%.1f%%", 100 * p.bubble_fraction), fmt("%.1f%%", 100 * m.bubble_fraction), ""},
      {"exposed communication (s)", fmt("%.6g", p.exposed_comm_s), fmt("%.6g", m.exposed_comm_s),
       pct(relative_error(p.exposed_comm_s, m.exposed_comm_s))},
      {"peak memory (bytes)", fmt("%.0f", p.peak_memory_bytes), fmt("%.0f", m.peak_memory_bytes),
       pct(relative_error(p.peak_memory_bytes, m.peak_memory_bytes))}};
  if (p.has_band())
    rows.insert(rows.begin() + 1, {"step time 10-90% band (s)", fmt("%.6g", p.band_low_s) + " - " + fmt("%.6g", p.band_high_s),
                                   fmt("%.6g", m.step_time_s), p.band_verdict(m.step_time_s)});
  std::vector<std::vector<std::string>> kinds;
  for (const KindSummary& k : c.kinds)
    kinds.push_back({k.kind, std::to_string(k.count), fmt("%.6g", k.predicted_median_s), fmt("%.6g", k.measured_median_s),
                     pct(relative_error(k.predicted_median_s, k.measured_median_s))});
  return "<h2>Summary</h2>" + html::table("summary", {"quantity", "predicted", "measured", "error"}, rows) +
         "<h2>Op kinds</h2>" +
         html::table("kinds", {"op kind", "matched", "predicted median (s)", "measured median (s)", "error"}, kinds) +
         "<p>" + std::to_string(c.ops.size()) + " events matched by (stage, name); " +
         std::to_string(c.unmatched_predicted) + " predicted and " + std::to_string(c.unmatched_measured) +
         " measured events have no counterpart.</p>\n";
}

}  // namespace

std::string comparison_html(const Comparison& c, const nlohmann::json& predicted, const nlohmann::json& measured) {
  const double s = std::max(span(predicted), span(measured));
  return html::page("Parallax: predicted vs measured step",
                    "<h1>Predicted vs measured step</h1>\n" + summary_tables(c) + kinds_svg(c.kinds) +
                        "<h2>Timelines</h2>\n" +
                        timeline_svg(predicted, "timeline-predicted", "Predicted step (simulate), by stage", s) +
                        timeline_svg(measured, "timeline-measured", "Measured step (train), by stage", s));
}

}  // namespace parallax
