// A provable lower bound on the simulated step time of a plan, from the same per-op costs the
// simulation lowers (simulator/step_costs.h), without simulating: what no schedule of the step
// program can beat. The search may skip simulating a plan whose bound is slower than its K-th
// best simulated plan: the top K is then the same as simulating every candidate.
#pragma once

#include <limits>

#include "models/model_spec.h"
#include "program/plan.h"
#include "simulator/cluster_spec.h"
#include "simulator/step_costs.h"

namespace parallax {

// Precondition: check_plan(plan, m, c.node.gpus) is ok. The result is at most simulate_step's
// step_time_s (tested on every plan of several searches), in seconds. Once a cheaper part of the
// bound exceeds `beat_s` that part is returned (the caller only asks whether the plan can beat it).
double step_lower_bound_s(const ModelSpec& m, const ClusterSpec& c, const Plan& plan,
                          double beat_s = std::numeric_limits<double>::infinity());

// The most time any stage's dp stream spends on each micro-batch's collectives (ZeRO-2/3's
// per-pass gathers and reductions), in seconds: no step grows by less per micro-batch.
double dp_stream_seconds_per_micro_batch(const ModelSpec& m, const OpCosts& costs, const Plan& plan);

}  // namespace parallax
