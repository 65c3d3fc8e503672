// simulate_step: one training step of a plan through the discrete-event engine — the way reads
// plan -> StepProgram (program/) -> per-op costs (simulator/step_costs.h) -> task graph
// (lowering.h) -> timeline (simulator/engine.h) -> report. Everything in the result comes from the
// timeline and the program: step time; per stage busy, bubble, exposed TP / PP / DP time and peak
// memory with activations held as the schedule holds them; bytes moved; FLOP/s and MFU. The
// StepReport is the same type the analytical estimate fills, so every table and exporter reads
// either.
#pragma once

#include <array>

#include <vector>

#include <nlohmann/json.hpp>

#include "planner/estimate.h"
#include "planner/lowering.h"
#include "simulator/engine.h"

namespace parallax {

struct StageReport {
  double busy_s = 0;        // F/B/W compute, TP collectives inside included
  double bubble_s = 0;      // the pipeline phase less busy_s (StepReport's definition)
  double exposed_pp_s = 0;  // compute waiting for a pipeline transfer
  double exposed_dp_s = 0;  // compute waiting for DP/ZeRO communication, and the step's tail after the pipeline
  double tp_s = 0;          // TP collectives inside compute ops (on the critical path)
  double pipeline_end_s = 0;
  int64_t peak_in_flight = 0;  // chunk-passes whose activations the stage holds at its peak
  MemoryBreakdown memory;
};

struct Simulation {
  double tp_s(const ProgramOp& op, int64_t stage) const {
    return op.type == ProgramOpType::kCompute ? tp_pass_s[stage][static_cast<int>(op.pass)] : 0.0;
  }
  Plan plan;
  StepReport report;
  std::vector<StageReport> stages;
  LoweredStep step;
  Timeline timeline;
  // The TP time inside a compute op, per stage by pass (F, B, W).
  std::vector<std::array<double, 3>> tp_pass_s;
  bool extrapolated = false;  // simulate_report's line through three shorter steps
};

// For processes that simulate many steps (planner, simulate, the benchmarks): keeps freed memory
// in the process. Each step allocates and frees the same large arrays, and glibc would hand them
// back to the kernel, which zeroes fresh pages on every reuse (most of a 1T step's time).
void keep_freed_memory();

// Precondition: check_plan(plan, m, c.node.gpus) is ok. Errors: a deadlocked program.
Result<Simulation> simulate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// The step's report (and per-stage reports) without its timeline, for the search. A schedule's
// steady state repeats once every stage holds its full share of micro-batches, so every measure of
// the step — its time, each stage's busy, exposed and in-flight figures, the bytes sent — is an
// affine function of the micro-batch count m from there on. With m well past that point, three
// steps of m_a, m_a + q and m_a + 2q micro-batches (q = PP for interleaving, else 1; m_a = PP + 2,
// interleaved 2 PP) are simulated when together they are shorter than the step; if their measures lie on one line (to 1e-9),
// the line gives m's, else the whole step is simulated. The result equals simulate_step's to
// rounding (tested on every schedule); `extrapolated` says which way it came, and `step` and
// `timeline` are empty when it was extrapolated.
Result<Simulation> simulate_report(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// What the timeline and the program say of a step, before the memory model and the totals.
struct StepMeasures {
  double makespan_s = 0, optimizer_s = 0;
  std::vector<StageReport> stages;    // without memory and bubble
  std::vector<CommBytes> stage_bytes; // sent per GPU of each stage (TP, PP, DP)
};
// Those of a simulated (not extrapolated) step.
StepMeasures measures_of(const Simulation& sim);
// Those of one step of `plan` through every event, without the report (simulate_report's short
// steps). Errors: as simulate_step.
Result<StepMeasures> simulate_measures(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);
// The report of `sim.plan` from its measures: memory per stage, the worst stage's figures, bubble,
// bytes, FLOPs and MFU.
void summarise(const ModelSpec& m, const ClusterSpec& c, const LayerTiming& layer, const StepMeasures& measures,
               Simulation& sim);

// Per stage: busy, bubble, exposed TP / PP / DP seconds, peak in flight and memory by category.
nlohmann::json stage_reports_json(const Simulation& sim);

// The Chrome trace of a simulation (program/trace_schema.h): one event per program op under its
// canonical name — a receive spans from its posting to the data's arrival, as the runtimes measure
// it (posted in program order, so receives never overlap on their track; zero-length at the
// posting when the data came first) — one "tp ..." event per compute op with TP collectives, and
// the activation bytes each stage holds over time.
nlohmann::json simulation_trace(const Simulation& sim, const nlohmann::json& metadata);

// The pipeline chart (SVG) of a simulation.
std::string simulation_svg(const Simulation& sim, const std::string& title);

}  // namespace parallax
