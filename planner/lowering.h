// Lowering: Plan + model + cluster -> TaskGraph of one training step, one representative rank per
// pipeline stage (DP replicas and TP ranks are symmetric). Per stage: its schedule's F/B/W ops on
// the compute stream (TP collectives inside them, on the critical path), pipeline sends (blocking,
// as Megatron's send/recv pairs are: folded into the sending op; with overlap_p2p, tasks on the
// pp-send stream), DP gradient reduction in buckets on the dp stream (overlapping the last
// micro-batch's backward when the plan asks for it), ZeRO-1/2 reduce-scatter and all-gather, ZeRO-3
// parameter gathers prefetched one op ahead, and the optimizer step. Op durations come from the
// same layer timings as the analytical estimate.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_spec.h"
#include "planner/estimate.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "simulator/cluster_spec.h"
#include "simulator/task_graph.h"

namespace parallax {

struct LoweredStep {
  TaskGraph graph;
  std::vector<std::vector<PipelineOp>> ops;      // per stage, the schedule
  std::vector<std::vector<TaskId>> op_tasks;     // per stage, the (last) compute task of each op
  std::vector<std::vector<TaskId>> op_first_tasks;  // the first, where an op is cut into pieces
  std::vector<TaskId> optimizer;                 // per stage
  std::vector<StreamId> compute_stream;          // per stage
  LayerTiming layer;
  EdgeTiming edge;
  double activation_bytes_per_pass = 0;          // one chunk-pass of one micro-batch, layers only
  // Blocking send/recv (the default) are folded into the sending op: its last `blocking_send_s`.
  double blocking_send_s = 0;
  double send_bytes = 0;                         // one pipeline transfer, per GPU
};

// The virtual stage `op` on `stage` sends its output to (F: the next, B: the previous), or -1.
int64_t send_target(const Plan& plan, const PipelineOp& op, int64_t stage);

// Precondition: check_plan(plan, m, c.node.gpus) is ok.
LoweredStep lower_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

}  // namespace parallax
