// Discrete-event engine: runs a TaskGraph. Each stream starts its next task as soon as the stream
// is free and the task's dependencies have finished; finishing tasks are events in a binary heap
// keyed by (time, task id), so ties resolve the same way every run and the result is
// deterministic. A graph whose streams wait on each other in a cycle is reported, not hung on.
//
// Contention: while tasks with an sm_share run on a rank (a collective's NCCL CTAs hold whole
// SMs: NVIDIA/nccl issue #689), the rank's compute task progresses at 1 - (their sum) of its
// speed (at least kMinComputeRate); its finish is re-planned each time that sum changes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/status.h"
#include "simulator/task_graph.h"

namespace parallax {

inline constexpr double kMinComputeRate = 0.1;

struct Timeline {
  std::vector<double> start_s, finish_s;  // per task
  double makespan_s = 0;
  int64_t events = 0;  // tasks finished (each one heap push and pop)
};

// Errors: a deadlock (some task can never start), naming the first stuck task (by `name`, else
// its id) and its stream.
Result<Timeline> run_tasks(const TaskGraph& graph, const std::function<std::string(TaskId)>& name = {});

}  // namespace parallax
