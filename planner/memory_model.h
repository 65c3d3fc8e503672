// Memory model: bytes per GPU on each pipeline stage of a plan — weights, gradients and optimizer
// states by precision and ZeRO stage (mixed precision: 2 + 2 + 12 bytes per parameter, 2 + 4 + 12
// with fp32 gradients, fp32: 4 + 4 + 8; ZeRO-1 shards the optimizer over DP, ZeRO-2 also the
// gradients, ZeRO-3 everything),
// activations (layer_cost.h per layer x layers per chunk x what the schedule keeps in flight),
// embedding and logit buffers, communication buffers, an allocator margin and the cluster's
// reserved memory. Offload moves optimizer states (ZeRO-3: also parameters) to host memory.
#pragma once

#include <cstdint>

#include "models/layer_cost.h"
#include "models/model_spec.h"
#include "program/model_state.h"
#include "program/plan.h"

namespace parallax {

// ZeRO (Rajbhandari et al. 2020) model-state bytes per GPU for `params` parameters over `dp` ranks.
double zero_model_state_bytes(double params, int64_t dp, int zero_stage, Precision p, bool fp32_gradients = false);

// Chunk-passes whose activations stage `stage` holds at its peak (each pass = one micro-batch
// through one chunk of L/(p*v) layers): GPipe m; 1F1B min(p - i, m); interleaved (Megatron's
// warm-up) min(m*v, 2(p - i - 1) + (v - 1)p + 1); ZB-H1 min(p, m) on every stage — it keeps 1F1B's
// peak, p, but later stages defer W passes up to it (planner/schedule.cc).
int64_t in_flight_chunk_passes(Schedule s, int64_t pp, int64_t micro_batches, int64_t chunks, int64_t stage);

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;
  double margin = 0;    // allocator margin + the cluster's reserved memory
  double host = 0;      // bytes this GPU keeps in host memory (offload)
  double total() const { return weights + gradients + optimizer + activations + buffers + margin; }
};

// `reserved_bytes`: the cluster's per-GPU reserve (CUDA context, library workspaces).
// `in_flight`: chunk-passes held at the peak (the simulation counts them on the schedule; -1: the
// closed form above).
MemoryBreakdown stage_memory(const ModelSpec& m, const Plan& plan, int64_t stage, double reserved_bytes,
                             int64_t in_flight = -1);
// The stage with the largest total.
MemoryBreakdown peak_memory(const ModelSpec& m, const Plan& plan, double reserved_bytes);

}  // namespace parallax
