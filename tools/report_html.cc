#include "tools/report_html.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "simulator/html_chart.h"

namespace parallax {

namespace {

constexpr double kGiB = 1073741824.0;
const char* const kCloud = "#9aa5b1";
const char* const kRanked = "#1f77b4";
const char* const kBest = "#d62728";
const char* const kFrontier = "#2ca02c";

std::string fixed(double v, int places) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", places, v);
  return b;
}

// Step time (x) against peak memory per GPU (y): the fitting plans as a grey cloud (one dot per
// occupied 2-pixel cell: tens of thousands of plans would otherwise make a page of megabytes), the
// frontier as a green line, the ranked plans as blue dots, plan 1 in red and labelled.
std::string scatter_svg(const PlannerReport& r) {
  double lo = INFINITY, hi = 0;
  for (const auto* set : {&r.fitting, &r.ranked})
    for (const ReportPoint& p : *set) lo = std::min(lo, p.step_time_s), hi = std::max(hi, p.step_time_s);
  if (!(hi > 0)) lo = 0, hi = 1;
  const double pad = std::max(hi - lo, 1e-3 * hi) * 0.05;
  const html::Frame f{80, 40, 760, 380, std::max(0.0, lo - pad), hi + pad, 0, r.hbm_bytes / kGiB};
  std::ostringstream o;
  o << "<svg id='scatter' class='chart scatter' xmlns='http://www.w3.org/2000/svg' width='900' height='500' "
       "font-family='sans-serif' font-size='11'><text class='chart-title' x='80' y='20' font-size='14'>"
       "Every fitting plan: step time vs peak memory per GPU</text>\n";
  const double limit = f.y(r.max_memory_fraction * r.hbm_bytes / kGiB);
  o << "<line class='memory-limit' x1='" << f.left << "' y1='" << html::num(limit) << "' x2='" << f.left + f.width
    << "' y2='" << html::num(limit) << "' stroke='#999' stroke-dasharray='4 3'/><text x='" << f.left + f.width - 4
    << "' y='" << html::num(limit - 4) << "' text-anchor='end' fill='#666'>--max-memory-fraction "
    << fixed(r.max_memory_fraction, 2) << "</text>\n<g class='plan-points' fill='" << kCloud << "'>";
  std::map<std::pair<long, long>, int> cells;
  for (const ReportPoint& p : r.fitting)
    ++cells[{std::lround(f.x(p.step_time_s) / 2), std::lround(f.y(p.peak_memory_bytes / kGiB) / 2)}];
  for (const auto& [xy, count] : cells) {
    o << "<circle cx='" << 2 * xy.first << "' cy='" << 2 * xy.second << "' r='2'";
    o << (count > 1 ? "><title>" + std::to_string(count) + " plans</title></circle>" : "/>");
  }
  o << "</g>\n<polyline class='pareto-frontier' fill='none' stroke='" << kFrontier << "' stroke-width='2' points='";
  for (size_t i : pareto_frontier(r.fitting))
    o << html::num(f.x(r.fitting[i].step_time_s)) << "," << html::num(f.y(r.fitting[i].peak_memory_bytes / kGiB)) << " ";
  o << "'/>\n<g class='ranked-points'>";
  for (const ReportPoint& p : r.ranked) {
    const double x = f.x(p.step_time_s), y = f.y(p.peak_memory_bytes / kGiB);
    o << "<circle class='ranked-point' cx='" << html::num(x) << "' cy='" << html::num(y) << "' r='5' fill='"
      << (p.rank == 1 ? kBest : kRanked) << "'><title>" << html::escape(p.label) << "</title></circle>";
    if (p.rank == 1) o << "<text x='" << html::num(x + 7) << "' y='" << html::num(y + 4) << "'>plan 1</text>";
  }
  o << "</g>\n"
    << html::axes(f, "predicted step time (s)", "peak memory per GPU (GiB)")
    << html::legend(f.left, f.top + f.height + 52,
                    {{"fitting plan (analytical estimate)", kCloud}, {"Pareto frontier (estimate)", kFrontier},
                     {"ranked plan (simulated)", kRanked}, {"plan 1", kBest}})
    << "</svg>\n";
  return o.str();
}

// Plan 1's peak memory as one stacked bar on a GiB axis up to the GPU's HBM.
std::string memory_svg(const PlannerReport& r) {
  const MemoryBreakdown& m = r.best_memory;
  const std::vector<std::pair<std::string, double>> parts = {
      {"weights", m.weights}, {"gradients", m.gradients}, {"optimizer states", m.optimizer},
      {"activations", m.activations}, {"buffers", m.buffers}, {"margin and reserve", m.margin}};
  const char* colours[] = {"#4e79a7", "#59a14f", "#f28e2b", "#e15759", "#76b7b2", "#bab0ac"};
  const html::Frame f{80, 40, 760, 40, 0, r.hbm_bytes / kGiB, 0, 1};
  std::ostringstream o;
  o << "<svg id='memory-breakdown' class='chart memory' xmlns='http://www.w3.org/2000/svg' width='1100' height='170' "
       "font-family='sans-serif' font-size='11'><text class='chart-title' x='80' y='20' font-size='14'>"
       "Plan 1: memory per GPU on its fullest stage ("
    << fixed(m.total() / kGiB, 1) << " of " << fixed(r.hbm_bytes / kGiB, 1) << " GiB)</text>\n";
  double at = 0;
  std::vector<std::pair<std::string, std::string>> legend;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double w = f.x(at + parts[i].second / kGiB) - f.x(at);
    o << "<rect class='memory-part' x='" << html::num(f.x(at)) << "' y='" << f.top << "' width='" << html::num(w)
      << "' height='" << f.height << "' fill='" << colours[i] << "'><title>" << parts[i].first << " "
      << fixed(parts[i].second / kGiB, 2) << " GiB</title></rect>";
    legend.push_back({parts[i].first + " " + fixed(parts[i].second / kGiB, 1) + " GiB", colours[i]});
    at += parts[i].second / kGiB;
  }
  const std::string axes = html::axes(f, "memory per GPU (GiB)", "");
  o << "\n" << axes.substr(0, axes.find("<g class='axis y-axis'>")) << html::legend(f.left, f.top + f.height + 62, legend)
    << "</svg>\n";
  return o.str();
}

// simulate --svg's chart, given the id and class the page's readers (and its test) look for.
std::string timeline_section(const std::string& svg) {
  if (svg.empty()) return "<p>No timeline: plan 1 could not be simulated event by event.</p>\n";
  std::string out = svg;
  const size_t at = out.find("<svg ");
  if (at != std::string::npos) out.insert(at + 5, "id='timeline' class='chart timeline' ");
  return out;
}

}  // namespace

std::vector<size_t> pareto_frontier(const std::vector<ReportPoint>& points) {
  std::vector<size_t> order(points.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return points[a].step_time_s != points[b].step_time_s ? points[a].step_time_s < points[b].step_time_s
                                                          : points[a].peak_memory_bytes < points[b].peak_memory_bytes;
  });
  std::vector<size_t> frontier;
  for (size_t i : order)
    if (frontier.empty() || points[i].peak_memory_bytes < points[frontier.back()].peak_memory_bytes) frontier.push_back(i);
  return frontier;
}

std::string planner_report_html(const PlannerReport& r) {
  std::ostringstream body;
  body << "<h1>" << html::escape(r.title) << "</h1>\n";
  for (const std::string& line : r.settings) body << "<p class='setting'>" << html::escape(line) << "</p>\n";
  body << "<h2>Ranked plans</h2>\n"
       << html::table("ranked-plans", r.header, r.rows) << "<h2>Step time against memory</h2>\n"
       << "<p>Grey: " << (r.fitting_total > static_cast<int64_t>(r.fitting.size())
                              ? "the fastest " + std::to_string(r.fitting.size()) + " of the " +
                                    std::to_string(r.fitting_total) + " plans that fit"
                              : "every plan that fits")
       << ", priced by the analytical estimate that orders the search; blue: the ranked plans as simulated (the "
          "table's numbers).</p>\n"
       << scatter_svg(r) << "<h2>Plan 1: timeline of one step</h2>\n"
       << timeline_section(r.best_timeline_svg) << "<h2>Plan 1: memory</h2>\n"
       << memory_svg(r);
  return html::page(r.title, body.str());
}

}  // namespace parallax
