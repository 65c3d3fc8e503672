// `planner --html`: the search as one self-contained HTML page — the ranked table, a scatter of
// every fitting plan (step time against peak memory, the Pareto frontier marked), the best plan's
// timeline (simulate --svg's chart) and its memory breakdown. Inline SVG only: no script, font
// or file outside the page.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/memory_model.h"

namespace parallax {

struct ReportPoint {
  double step_time_s = 0, peak_memory_bytes = 0;
  int rank = 0;  // 1.. for the ranked (simulated) plans, 0 for the others
  std::string label;
};

struct PlannerReport {
  std::string title;                  // "Parallax: 13b on 64 x H100 SXM5 80GB (dgx-h100)"
  std::vector<std::string> settings;  // lines under the title (batch, precision, defaults, search counts)
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<ReportPoint> fitting;   // every fitting plan (or the fastest), by the analytical estimate
  int64_t fitting_total = 0;          // how many plans fit; more than fitting.size() when capped
  std::vector<ReportPoint> ranked;    // the ranked plans, simulated
  std::string best_timeline_svg;      // simulation_svg of plan 1
  MemoryBreakdown best_memory;        // plan 1's fullest stage
  double hbm_bytes = 0, max_memory_fraction = 1;
};

// Indices of the points no other point beats on both step time and memory (ties count as
// beaten by the first), sorted by step time: the Pareto frontier.
std::vector<size_t> pareto_frontier(const std::vector<ReportPoint>& points);

std::string planner_report_html(const PlannerReport& r);

}  // namespace parallax
