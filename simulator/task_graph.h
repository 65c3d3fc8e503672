// TaskGraph: the work of one training step as tasks on streams. Every rank that is simulated
// (one representative per pipeline stage) owns streams — compute, tp, pp-send, pp-recv, dp — and a
// stream runs its tasks one at a time in the order they were added; a task also waits for the
// tasks it depends on. Lowering (planner/lowering.h) builds the graph; the engine (engine.h) runs
// it; the trace writer names tasks from their labels. Flat arrays, no per-task allocation: a
// 16,384-GPU step is p timelines of a few hundred thousand tasks at most.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parallax {

enum class StreamKind : uint8_t { kCompute, kTp, kPpSend, kPpRecv, kDp };
const char* stream_name(StreamKind k);  // "compute", "tp", "pp-send", "pp-recv", "dp"

// What a task is, for reports and trace names.
enum class TaskKind : uint8_t {
  kForward,        // "F mb=3 chunk=0"
  kBackward,       // "B mb=3 chunk=0"
  kWeight,         // "W mb=3 chunk=0"
  kSendForward,    // "send pp mb=3" (activation to the next stage)
  kSendBackward,   // "send pp mb=3" (gradient to the previous stage)
  kDpAllReduce,    // "allreduce dp bucket=2"
  kDpReduceScatter,  // "reduce-scatter dp bucket=2"
  kDpAllGather,    // "all-gather dp bucket=2"
  kOptimizer,      // "optimizer"
  kOffload,        // "offload": host optimizer step and PCIe copies
};

struct TaskLabel {
  TaskKind kind;
  int32_t micro_batch = -1;
  int32_t chunk = -1;
  int32_t index = -1;  // bucket for DP tasks
};
std::string task_name(const TaskLabel& l);

using TaskId = int32_t;
using StreamId = int32_t;

class TaskGraph {
 public:
  StreamId add_stream(int32_t rank, StreamKind kind);
  // Appends a task to `stream`'s program order.
  TaskId add_task(StreamId stream, double duration_s, TaskLabel label, double bytes = 0);
  // `after` starts no earlier than `before` finishes.
  void add_dependency(TaskId before, TaskId after);
  void reserve(size_t tasks, size_t dependencies);

  size_t task_count() const { return duration_s_.size(); }
  size_t stream_count() const { return stream_rank_.size(); }
  double duration_s(TaskId t) const { return duration_s_[t]; }
  const TaskLabel& label(TaskId t) const { return label_[t]; }
  double bytes(TaskId t) const { return bytes_[t]; }
  StreamId stream(TaskId t) const { return stream_[t]; }
  int32_t stream_rank(StreamId s) const { return stream_rank_[s]; }
  StreamKind stream_kind(StreamId s) const { return stream_kind_[s]; }
  const std::vector<std::pair<TaskId, TaskId>>& dependencies() const { return edges_; }

 private:
  std::vector<double> duration_s_, bytes_;
  std::vector<TaskLabel> label_;
  std::vector<StreamId> stream_;
  std::vector<int32_t> stream_rank_;
  std::vector<StreamKind> stream_kind_;
  std::vector<std::pair<TaskId, TaskId>> edges_;
};

}  // namespace parallax
