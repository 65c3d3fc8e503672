// simulate_step: one training step of a plan through the discrete-event engine — lower the plan
// to a task graph, run it, and summarise: step time, per-stage busy / bubble / exposed PP and DP
// time, peak memory with activations held as the schedule holds them, bytes moved, FLOP/s and MFU.
// The summary fills the same Estimate the analytical model produces, so every report and
// exporter reads either.
#pragma once

#include <vector>

#include "planner/estimate.h"
#include "planner/lowering.h"
#include "simulator/engine.h"

#include <nlohmann/json.hpp>

namespace parallax {

struct StageReport {
  double busy_s = 0;        // F/B/W compute, TP collectives inside included
  double bubble_s = 0;      // compute stream idle before the stage's pipeline work ends
  double exposed_pp_s = 0;  // compute waiting for an activation or gradient in flight
  double exposed_dp_s = 0;  // waiting for DP/ZeRO communication: stalls, before and after the optimizer
  double dp_stall_s = 0;    // of which blocking ZeRO-2/3 reductions between ops
  double tp_s = 0;          // TP collectives on the critical path
  double pipeline_end_s = 0;
  int64_t peak_in_flight = 0;  // chunk-passes whose activations the stage holds at its peak
  MemoryBreakdown memory;
};

struct Simulation {
  Plan plan;
  Estimate estimate;
  std::vector<StageReport> stages;
  LoweredStep step;
  Timeline timeline;
};

// Precondition: check_plan(plan, m, c.node.gpus) is ok. Errors: a deadlocked schedule.
Result<Simulation> simulate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// Per stage: busy, bubble, exposed TP / PP / DP seconds, peak in flight and memory by category.
nlohmann::json stage_reports_json(const Simulation& sim);

// The Chrome trace of a simulation: its tasks, the TP collectives inside every layer of every op
// ("allreduce tp layer=K", or "reduce-scatter tp layer=K" with SP), and the activation bytes each
// stage holds over time.
nlohmann::json simulation_trace(const ModelSpec& m, const Plan& plan, const Simulation& sim,
                                const nlohmann::json& metadata);

}  // namespace parallax
