// Pipeline schedule generator: for each pipeline stage, the ordered list of ops F(mb, chunk),
// B(mb, chunk) and, for zero-bubble schedules, W(mb, chunk) — GPipe, 1F1B, interleaved 1F1B
// (Megatron-LM's warm-up / steady / cool-down order) and ZB-H1 (Qi et al. 2024, the handcrafted
// schedule). The order depends on the plan alone, never on op durations, so the simulator and both
// runtimes run the very same lists (program/step_program.h builds on them).
//
// F of (mb, chunk) on stage s needs F of (mb, chunk) on the previous virtual stage; B needs B on
// the next virtual stage (virtual stage = chunk * pp + stage). B includes the weight gradients
// except in ZB-H1, where W computes them later.
#pragma once

#include <cstdint>
#include <vector>

#include "program/plan.h"

namespace parallax {

enum class OpKind : uint8_t { kForward, kBackward, kWeight };

struct PipelineOp {
  OpKind kind;
  int32_t micro_batch;
  int32_t chunk;
  bool operator==(const PipelineOp&) const = default;
};

// True when B computes only input gradients and W the weight gradients.
bool splits_weight_gradients(Schedule s);
// The one rule for when a micro-batch's activations of a chunk are freed: after its B, or under
// ZB-H1 after its W (W still needs the layer inputs).
bool releases_activations(OpKind kind, Schedule s);

inline int64_t virtual_stage(int64_t stage, int64_t chunk, int64_t pp) { return chunk * pp + stage; }

// The ops of every stage, in execution order. Preconditions: pp, m, v >= 1; interleaved needs
// m % pp == 0 (check_plan enforces both).
//
// ZB-H1: stage i runs 1F1B's p - i - 1 warm-up forwards, then 1F1B's F/B pairs, but holds back
// the W of its first i backwards; from then on each B is followed by the oldest pending W, and the
// held-back Ws end the stage. Every stage thus keeps at most p micro-batches' activations (1F1B's
// peak, on stage 0), and the Ws fill 1F1B's cool-down bubbles: with per-stage times F, B, W the
// step takes m(F + B + W) + (p - 1)(F + B - W) for m >= p (Qi et al., Section 3.1).
std::vector<std::vector<PipelineOp>> pipeline_ops(Schedule s, int64_t pp, int64_t micro_batches, int64_t chunks);

// Largest number of chunk-passes a stage holds activations for (F done, not yet released).
int64_t max_in_flight(const std::vector<PipelineOp>& ops, Schedule s);

}  // namespace parallax
