// "Why is plan 1 better than plan 2?": two simulated plans side by side, their step time and
// memory split into the terms the simulation already reports, and a sentence naming the one or
// two terms that decide the difference. No cost is modelled here: the terms are read off the
// simulation's busiest stage, and the recompute, CP/EP exchange and offload shares off the same
// per-layer and optimizer costs the simulation was priced with.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_spec.h"
#include "planner/simulation.h"
#include "simulator/cluster_spec.h"

namespace parallax {

// One plan's step as named terms: time_s sums to the step time, memory_bytes to the peak.
struct PlanTerms {
  std::vector<std::pair<std::string, double>> time_s, memory_bytes;
  double step_time_s = 0, peak_memory_bytes = 0;
};

// The step of the stage with the most compute (busy_s): compute, recompute, exposed TP / CP / EP /
// PP / DP communication, the optimizer, offload transfers, and the rest of the step that stage
// stands idle (bubble); memory of the fullest stage by category.
PlanTerms plan_terms(const ModelSpec& m, const ClusterSpec& c, const Simulation& sim);

// "Plan 1 is 0.079 s (0.9%) faster per step than plan 2: bubble 0.302 s shorter." — the terms
// that carry the difference of b - a in its direction, the largest first, a second named if it
// carries at least a quarter of the first, and the largest opposing term if it offsets a quarter
// of the difference. `unit` is "s" or "GiB" (values in bytes, shown in GiB).
std::string deciding_terms(const std::string& name_a, const std::string& name_b,
                           const std::vector<std::pair<std::string, double>>& a,
                           const std::vector<std::pair<std::string, double>>& b, const std::string& unit);

// The side-by-side table and the two sentences, for the planner's text output.
std::string explain_text(const std::string& name_a, const std::string& name_b, const PlanTerms& a, const PlanTerms& b);
nlohmann::json explain_json(int rank_a, int rank_b, const PlanTerms& a, const PlanTerms& b);

}  // namespace parallax
