// Analytical step-time model: the fast closed-form estimate of one training step of a plan — roofline
// compute per layer (GEMM efficiency by shape from the cluster file), TP collectives on the critical
// path, pipeline send/recv, the bubble by the closed forms ((p-1)/m of the ideal for GPipe and
// 1F1B, (p-1)/(v*m) interleaved, ZB-H1's (p-1)(F+B-W)), DP/ZeRO traffic with the ring alpha-beta
// model, the optimizer step and offload. The planner ranks with it; the simulator refines it.
#pragma once

#include <cstdint>

#include "models/model_spec.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "simulator/cluster_spec.h"

namespace parallax {

// One layer, one micro-batch, one GPU; TP collectives included.
struct LayerTiming {
  double forward_s = 0;
  double backward_input_s = 0;  // incl. what recompute re-runs
  double backward_weight_s = 0;
  double tp_comm_s = 0;         // the TP collective time inside the three above
  double tp_forward_s = 0, tp_backward_input_s = 0, tp_backward_weight_s = 0;  // its split by pass
  double tp_bytes = 0;          // bytes this GPU sends in TP collectives, forward + backward
};
LayerTiming layer_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// The embedding (first stage) and the output layer with the loss (last stage), one micro-batch.
struct EdgeTiming {
  double first_forward_s = 0, first_backward_s = 0;
  double last_forward_s = 0, last_backward_input_s = 0, last_backward_weight_s = 0;
};
EdgeTiming edge_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

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
  double tp = 0, pp = 0, dp = 0;
};

// Bytes a GPU sends per step over NVLink (inside a node) and over the network, from its TP, PP and
// DP bytes and where each group lies in the rank order.
struct TierBytes {
  double nvlink = 0, network = 0;
};
TierBytes bytes_by_tier(const ClusterSpec& c, const Plan& plan, const CommBytes& bytes);

struct Estimate {
  double step_time_s = 0;
  double pipeline_s = 0;       // forward/backward over all micro-batches, bubbles included
  double bubble_fraction = 0;  // idle share of pipeline_s, averaged over stages
  double dp_exposed_s = 0;     // DP / ZeRO communication not hidden behind compute
  double optimizer_s = 0;      // incl. offload transfers
  double overhead_s = 0;
  double stage_forward_s = 0, stage_backward_s = 0;  // per micro-batch, slowest stage
  double tp_exposed_s = 0;     // TP collectives on the critical path per step
  double model_flops = 0, hardware_flops = 0;
  double tokens_per_s = 0, mfu = 0, model_tflops_per_gpu = 0, hardware_tflops_per_gpu = 0;
  CommBytes comm_bytes_per_gpu;
  TierBytes tier_bytes_per_gpu;
  MemoryBreakdown memory;  // the stage with the highest peak
  double peak_memory_bytes = 0;
  bool fits_in_memory = false;
  bool fits_in_host_memory = false;
};

// One pipeline transfer: the boundary activation (or its gradient) of one micro-batch. Megatron
// splits it over the TP ranks, each sending 1/t (scatter-gather); without SP the receiver then
// all-gathers it over TP, which is part of the transfer's time.
struct P2pCost {
  double bytes = 0;   // sent by one GPU
  double time_s = 0;  // until the receiver holds the whole tensor
};
P2pCost pipeline_transfer(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// Optimizer step of one GPU holding `stage_params` parameters before ZeRO sharding: memory-bound
// passes over the local shard — overflow check and gradient norm (read g each), Adam (read g, read
// and write fp32 master, m, v), cast to 16-bit weights (read 4, write 2), zero the gradients
// (write g): 4g + 30 bytes per parameter, g the gradient bytes (2, or 4 with fp32_gradients; fp32:
// no cast, 3g + 24) — at the optimizer efficiency of HBM bandwidth on the GPU, or (offload) on the
// host plus the PCIe copies of gradients down and weights up.
double optimizer_step_s(const ClusterSpec& c, const Plan& plan, double stage_params);

// Precondition: check_plan(plan, m, c.node.gpus) is ok.
Estimate estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);
// Fills what follows from step_time_s, comm_bytes_per_gpu and memory: bytes by tier, model and
// hardware FLOPs, tokens/s, TFLOP/s per GPU, MFU, peak memory and whether it fits.
void finish_estimate(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, Estimate& e);

// The same with the per-layer and edge timings precomputed (they depend only on t, b, s, SP,
// recompute, precision and the execution settings), for the search's inner loop.
Estimate estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan,
                       const LayerTiming& layer, const EdgeTiming& edge);

}  // namespace parallax
