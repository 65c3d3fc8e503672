#include "simulator/task_graph.h"

namespace parallax {

StreamId TaskGraph::add_stream(int32_t rank, StreamKind kind) {
  stream_rank_.push_back(rank);
  stream_kind_.push_back(kind);
  return static_cast<StreamId>(stream_rank_.size() - 1);
}

// add_task and add_dependency are inline: lowering calls them once per op.

void TaskGraph::reserve(size_t tasks, size_t dependencies) {
  duration_s_.reserve(tasks);
  tag_.reserve(tasks);
  sm_share_.reserve(tasks);
  stream_.reserve(tasks);
  edges_.reserve(dependencies);
}

}  // namespace parallax
