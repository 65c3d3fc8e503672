// Lowering: a StepProgram and the cost model -> the TaskGraph of one training step, one
// representative rank per pipeline stage (DP replicas and TP ranks are symmetric). Every program
// op becomes a task on its stream with its duration from OpCosts, and waits for what the program
// says it waits for. A send and its matching receive are one transfer that starts when the
// producer finishes and that the receiver's consumer waits for. With overlap_p2p it is a task on
// the sender's pp-send stream; with Megatron's blocking pairs (the default) the sender's next op
// waits for it too, which is the same as lengthening the producer's last task by the transfer —
// so it is folded in there (half the tasks of a deep pipeline). A compute op that DP buckets wait
// on in parts is cut into one piece per bucket; a first forward fed by overlap_param_gather's
// weight gathers is cut before its last bucket of layers, which waits for the last gather.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_spec.h"
#include "program/step_program.h"
#include "simulator/step_costs.h"
#include "simulator/task_graph.h"

namespace parallax {

struct LoweredStep {
  StepProgram program;
  TaskGraph graph;
  // Per stage, per program op: its first and last task (the same unless the op was cut). A send
  // and its receive map to the same transfer task.
  std::vector<std::vector<TaskId>> first_task, last_task;
  std::vector<StreamId> compute_stream;  // per stage
  double folded_send_s = 0;  // a blocking transfer, folded into the end of its producer's last task

  // The blocking send folded into the end of op i of stage s (0 if none).
  double folded_tail_s(int64_t s, size_t i) const;
};

// Precondition: check_plan(plan, m, c.node.gpus) is ok.
LoweredStep lower_step(const ModelSpec& m, const Plan& plan, const OpCosts& costs);

}  // namespace parallax
