// Analytical step-time model: the fast closed-form estimate of one training step of a plan — roofline
// compute per layer (GEMM efficiency by shape from the cluster file), TP collectives on the critical
// path, pipeline send/recv, the bubble by the closed forms ((p-1)/m of the ideal for GPipe and
// 1F1B, (p-1)/(v*m) interleaved, ZB-H1's (p-1)(F+B-W)), DP/ZeRO traffic with the ring alpha-beta
// model, the optimizer step and offload. The planner ranks with it; the simulator refines it.
#pragma once

#include <cstdint>

#include "models/layer_cost.h"
#include "models/model_spec.h"
#include "planner/memory_model.h"
#include "program/plan.h"
#include "simulator/cluster_spec.h"
#include "simulator/step_costs.h"

namespace parallax {

// Per micro-batch times of one pipeline stage: forward, input-gradient and weight-gradient passes.
struct StageTimes {
  double f = 0, b = 0, w = 0;
  double total() const { return f + b + w; }
};

// The pipeline part of a step: m micro-batches at the pace of the slowest stage plus the schedule's
// fill and drain priced at the mean stage — (p-1) T for GPipe and 1F1B, (p-1)/v T interleaved,
// (p-1)(F+B-W) for ZB-H1. For uniform stages this is (m + p - 1) T, a bubble of (p-1)/(m+p-1).
// Sets *bubble_fraction to the idle share of the result.
double pipeline_time_s(const Plan& p, int64_t m, const StageTimes& slowest, const StageTimes& mean,
                       double* bubble_fraction);

struct CommBytes {
  double tp = 0, pp = 0, dp = 0;  // dp: data-parallel and ZeRO traffic, the experts' included
  // The parts of dp on other groups than the shard's: hybrid sharding's replica all-reduce and the
  // experts' reductions and gathers over the expert data-parallel ranks.
  double dp_replica = 0, dp_expert = 0;
  double cp = 0, ep = 0;  // CP's KV exchange, EP's token all-to-alls
};

// Bytes a GPU sends per step over NVLink (inside a node) and over the network, from its bytes per
// group and where each group lies in the rank order.
struct TierBytes {
  double nvlink = 0, network = 0;
};
TierBytes bytes_by_tier(const ClusterSpec& c, const Plan& plan, const CommBytes& bytes);

// What a prediction of one step says, whichever way it was made: the closed forms below
// (estimate_step) or the discrete-event simulation (planner/simulation.h). Every report, table and
// exporter reads this one type.
//
// Bubble fraction (one definition, docs/cost-model.md "Bubble"): the pipeline phase runs from the step's start
// to the end of the last F, B or W on any stage (pipeline_s); a stage's bubble is the part of that
// phase its compute stream does no F, B or W; bubble_fraction is the mean over stages of bubble /
// pipeline_s. `compare` computes the same from traces.
struct StepReport {
  const char* method = "estimate";  // "estimate" | "simulation"
  double step_time_s = 0;
  double pipeline_s = 0;       // start of the step to the end of the last F/B/W, bubbles included
  double bubble_fraction = 0;
  double dp_exposed_s = 0;     // DP / ZeRO communication not hidden behind compute
  double optimizer_s = 0;      // incl. offload transfers
  double overhead_s = 0;
  double tp_exposed_s = 0;     // TP collectives on the critical path per step
  // Model FLOPs by kModelFlopsConvention (MFU's), hardware FLOPs as the kernels execute them
  // (causal flash attention: about half the square; recompute included); hfu = hardware / peak.
  double model_flops = 0, hardware_flops = 0;
  double tokens_per_s = 0, mfu = 0, model_tflops_per_gpu = 0, hardware_tflops_per_gpu = 0, hfu = 0;
  const char* flops_convention = kModelFlopsConvention;
  CommBytes comm_bytes_per_gpu;
  TierBytes tier_bytes_per_gpu;
  MemoryBreakdown memory;  // the stage with the highest peak
  double peak_memory_bytes = 0;
  bool fits_in_memory = false;
  bool fits_in_host_memory = false;
};

// Precondition: check_plan(plan, m, c.node.gpus) is ok.
StepReport estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);
// Fills what follows from step_time_s, comm_bytes_per_gpu and memory: bytes by tier, model and
// hardware FLOPs, tokens/s, TFLOP/s per GPU, MFU, peak memory and whether it fits.
void finish_report(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, StepReport& e);

// The same with the per-layer and edge timings precomputed (they depend only on t, b, s, SP,
// recompute, precision and the execution settings), for the search's inner loop.
StepReport estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan,
                       const LayerTiming& layer, const EdgeTiming& edge);

}  // namespace parallax
