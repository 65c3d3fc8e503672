#include "simulator/task_graph.h"

namespace parallax {

const char* stream_name(StreamKind k) {
  switch (k) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kTp: return "tp";
    case StreamKind::kPpSend: return "pp-send";
    case StreamKind::kPpRecv: return "pp-recv";
    case StreamKind::kDp: return "dp";
  }
  return "?";
}

std::string task_name(const TaskLabel& l) {
  const std::string mb = "mb=" + std::to_string(l.micro_batch), chunk = " chunk=" + std::to_string(l.chunk);
  const std::string bucket = "bucket=" + std::to_string(l.index);
  switch (l.kind) {
    case TaskKind::kForward: return "F " + mb + chunk;
    case TaskKind::kBackward: return "B " + mb + chunk;
    case TaskKind::kWeight: return "W " + mb + chunk;
    case TaskKind::kSendForward:
    case TaskKind::kSendBackward: return "send pp " + mb;
    case TaskKind::kDpAllReduce: return "allreduce dp " + bucket;
    case TaskKind::kDpReduceScatter: return "reduce-scatter dp " + bucket;
    case TaskKind::kDpAllGather: return "all-gather dp " + bucket;
    case TaskKind::kOptimizer: return "optimizer";
    case TaskKind::kOffload: return "offload";
  }
  return "?";
}

StreamId TaskGraph::add_stream(int32_t rank, StreamKind kind) {
  stream_rank_.push_back(rank);
  stream_kind_.push_back(kind);
  return static_cast<StreamId>(stream_rank_.size() - 1);
}

TaskId TaskGraph::add_task(StreamId stream, double duration_s, TaskLabel label, double bytes) {
  duration_s_.push_back(duration_s);
  bytes_.push_back(bytes);
  label_.push_back(label);
  stream_.push_back(stream);
  return static_cast<TaskId>(duration_s_.size() - 1);
}

void TaskGraph::add_dependency(TaskId before, TaskId after) { edges_.emplace_back(before, after); }

void TaskGraph::reserve(size_t tasks, size_t dependencies) {
  duration_s_.reserve(tasks);
  bytes_.reserve(tasks);
  label_.reserve(tasks);
  stream_.reserve(tasks);
  edges_.reserve(dependencies);
}

}  // namespace parallax
