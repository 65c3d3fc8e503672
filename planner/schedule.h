// Pipeline schedule generator: for each pipeline stage, the ordered list of ops F(mb, chunk),
// B(mb, chunk) and, for zero-bubble schedules, W(mb, chunk) — GPipe, 1F1B, interleaved 1F1B
// (Megatron-LM's warm-up / steady / cool-down order) and ZB-H1 (Qi et al. 2024). The simulator
// lowers these lists to tasks and the runtime executes the very same lists, so this file knows
// nothing of either: no Boost, no simulator types.
//
// F of (mb, chunk) on stage s needs F of (mb, chunk) on the previous virtual stage; B needs B on
// the next virtual stage (virtual stage = chunk * pp + stage). B includes the weight gradients
// except in ZB-H1, where W computes them later.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/plan.h"

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

inline int64_t virtual_stage(int64_t stage, int64_t chunk, int64_t pp) { return chunk * pp + stage; }

// The ops of every stage, in execution order. Preconditions: pp, m, v >= 1; interleaved needs
// m % pp == 0 (check_plan enforces both). ZB-H1's order is list-scheduled with the given F, B
// and W durations of a stage (Qi et al.'s unit times by default; the simulator passes its own).
std::vector<std::vector<PipelineOp>> pipeline_ops(Schedule s, int64_t pp, int64_t micro_batches, int64_t chunks,
                                                  double f_time = 1, double b_time = 1, double w_time = 1);

// Largest number of chunk-passes a stage holds activations for (F done, B — or for ZB-H1 W — not
// yet), found by walking its op list.
int64_t max_in_flight(const std::vector<PipelineOp>& ops, Schedule s);

}  // namespace parallax
