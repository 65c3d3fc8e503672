#include "simulator/task_graph.h"

namespace parallax {

StreamId TaskGraph::add_stream(int32_t rank, StreamKind kind) {
  stream_rank_.push_back(rank);
  stream_kind_.push_back(kind);
  return static_cast<StreamId>(stream_rank_.size() - 1);
}

TaskId TaskGraph::add_task(StreamId stream, double duration_s, int32_t tag, float sm_share) {
  duration_s_.push_back(duration_s);
  tag_.push_back(tag);
  sm_share_.push_back(sm_share);
  stream_.push_back(stream);
  return static_cast<TaskId>(duration_s_.size() - 1);
}

void TaskGraph::add_dependency(TaskId before, TaskId after) { edges_.emplace_back(before, after); }

void TaskGraph::reserve(size_t tasks, size_t dependencies) {
  duration_s_.reserve(tasks);
  tag_.reserve(tasks);
  sm_share_.reserve(tasks);
  stream_.reserve(tasks);
  edges_.reserve(dependencies);
}

}  // namespace parallax
