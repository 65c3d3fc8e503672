// TaskGraph: the work of one training step as tasks on streams. Every rank that is simulated
// (one representative per pipeline stage) owns streams — compute, tp, pp-send, pp-recv, dp — and a
// stream runs its tasks one at a time in the order they were added; a task also waits for the
// tasks it depends on. Lowering (planner/lowering.h) builds the graph from a StepProgram, tagging
// each task with the program op it stands for; the engine (engine.h) runs it. Flat arrays, no
// per-task allocation: a 16,384-GPU step is p timelines of a few hundred thousand tasks at most.
#pragma once

#include <cstdint>
#include <vector>

#include "program/trace_schema.h"

namespace parallax {

using TaskId = int32_t;
using StreamId = int32_t;

class TaskGraph {
 public:
  StreamId add_stream(int32_t rank, StreamKind kind);
  // Appends a task to `stream`'s program order.
  // `tag`: what the task stands for, for whoever built the graph (lowering: the op's index).
  // `sm_share`: the fraction of the rank's SMs the task occupies while it runs (a collective's
  // NCCL CTAs); the rank's compute stream runs that much slower meanwhile (engine.h).
  TaskId add_task(StreamId stream, double duration_s, int32_t tag = -1, float sm_share = 0) {
    duration_s_.push_back(duration_s);
    tag_.push_back(tag);
    sm_share_.push_back(sm_share);
    stream_.push_back(stream);
    return static_cast<TaskId>(duration_s_.size() - 1);
  }
  // `after` starts no earlier than `before` finishes.
  void add_dependency(TaskId before, TaskId after) { edges_.emplace_back(before, after); }
  void reserve(size_t tasks, size_t dependencies);

  size_t task_count() const { return duration_s_.size(); }
  size_t stream_count() const { return stream_rank_.size(); }
  double duration_s(TaskId t) const { return duration_s_[t]; }
  int32_t tag(TaskId t) const { return tag_[t]; }
  float sm_share(TaskId t) const { return sm_share_[t]; }
  StreamId stream(TaskId t) const { return stream_[t]; }
  int32_t stream_rank(StreamId s) const { return stream_rank_[s]; }
  StreamKind stream_kind(StreamId s) const { return stream_kind_[s]; }
  const std::vector<std::pair<TaskId, TaskId>>& dependencies() const { return edges_; }

 private:
  std::vector<double> duration_s_;
  std::vector<int32_t> tag_;
  std::vector<float> sm_share_;
  std::vector<StreamId> stream_;
  std::vector<int32_t> stream_rank_;
  std::vector<StreamKind> stream_kind_;
  std::vector<std::pair<TaskId, TaskId>> edges_;
};

}  // namespace parallax
