// Comparison of a predicted trace (simulate --trace) with a measured one (train --trace): events
// matched by (process, name) — the canonical names both write — per-op and per-kind durations
// with their errors, step time, bubble and peak memory. `compare` prints it as Markdown, JSON or
// an HTML page with both timelines one above the other.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/status.h"

namespace parallax {

struct MatchedOp {
  int pid;
  std::string name;
  double predicted_s, measured_s;
};

struct KindSummary {
  std::string kind;  // "F", "B", "W", "send pp", "recv pp", "dp", "tp", "optimizer"
  int count = 0;
  double predicted_median_s = 0, measured_median_s = 0;
};

struct TraceSummary {
  double step_time_s = 0;
  double bubble_fraction = 0;  // as StepReport::bubble_fraction, from the F/B/W events
  double peak_memory_bytes = 0;  // from metadata, 0 when absent
  double exposed_comm_s = 0;     // communication events outside any compute event, per process (mean)
  // The prediction's 10-90% band (simulate's calibration) from metadata; 0, 0 when absent.
  double band_low_s = 0, band_high_s = 0;
  bool has_band() const { return band_high_s > 0; }
  // "inside" or "outside" the predicted band, for the measured step.
  std::string band_verdict(double measured_s) const;
};

struct Comparison {
  TraceSummary predicted, measured;
  std::vector<MatchedOp> ops;
  std::vector<KindSummary> kinds;
  int unmatched_predicted = 0, unmatched_measured = 0;
};

// Errors name the trace and what is missing (no traceEvents, an event without a name, ...).
Result<Comparison> compare_traces(const nlohmann::json& predicted, const nlohmann::json& measured);

// Relative error (predicted / measured - 1), 0 when measured is 0.
double relative_error(double predicted, double measured);

std::string comparison_markdown(const Comparison& c);
nlohmann::json comparison_json(const Comparison& c);
std::string comparison_html(const Comparison& c, const nlohmann::json& predicted, const nlohmann::json& measured);

}  // namespace parallax
