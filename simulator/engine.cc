#include "simulator/engine.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace parallax {

namespace {

// Compressed adjacency: successors of task t are succ[first[t] .. first[t + 1]).
struct Csr {
  std::vector<int32_t> first;
  std::vector<TaskId> succ;
};

Csr successors(const TaskGraph& g, std::vector<int32_t>& pending) {
  const size_t n = g.task_count();
  Csr c;
  c.first.assign(n + 1, 0);
  pending.assign(n, 0);
  for (const auto& [before, after] : g.dependencies()) {
    ++c.first[before + 1];
    ++pending[after];
  }
  for (size_t i = 0; i < n; ++i) c.first[i + 1] += c.first[i];
  c.succ.resize(g.dependencies().size());
  std::vector<int32_t> fill(c.first.begin(), c.first.end() - 1);
  for (const auto& [before, after] : g.dependencies()) c.succ[fill[before]++] = after;
  return c;
}

}  // namespace

Result<Timeline> run_tasks(const TaskGraph& g) {
  const size_t n = g.task_count(), streams = g.stream_count();
  std::vector<int32_t> pending;
  const Csr csr = successors(g, pending);

  // Program order of every stream: its tasks in the order they were added.
  std::vector<int32_t> order_first(streams + 1, 0);
  for (size_t t = 0; t < n; ++t) ++order_first[g.stream(static_cast<TaskId>(t)) + 1];
  for (size_t s = 0; s < streams; ++s) order_first[s + 1] += order_first[s];
  std::vector<TaskId> order(n);
  std::vector<int32_t> next(order_first.begin(), order_first.end() - 1);
  for (size_t t = 0; t < n; ++t) order[next[g.stream(static_cast<TaskId>(t))]++] = static_cast<TaskId>(t);
  std::vector<int32_t> head(order_first.begin(), order_first.end() - 1);
  std::vector<char> busy(streams, 0);

  Timeline tl;
  tl.start_s.assign(n, 0);
  tl.finish_s.assign(n, -1);
  using Event = std::pair<double, int64_t>;  // (finish time, sequence); sequence -> task
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap;
  std::vector<TaskId> task_of_seq;
  task_of_seq.reserve(n);

  auto try_start = [&](StreamId s, double now) {
    if (busy[s] || head[s] == order_first[s + 1]) return;
    const TaskId t = order[head[s]];
    if (pending[t] > 0) return;
    busy[s] = 1;
    tl.start_s[t] = now;
    heap.emplace(now + g.duration_s(t), static_cast<int64_t>(task_of_seq.size()));
    task_of_seq.push_back(t);
  };
  for (size_t s = 0; s < streams; ++s) try_start(static_cast<StreamId>(s), 0.0);
  while (!heap.empty()) {
    const auto [now, seq] = heap.top();
    heap.pop();
    const TaskId t = task_of_seq[seq];
    const StreamId s = g.stream(t);
    tl.finish_s[t] = now;
    tl.makespan_s = std::max(tl.makespan_s, now);
    ++tl.events;
    busy[s] = 0;
    ++head[s];
    for (int32_t i = csr.first[t]; i < csr.first[t + 1]; ++i) {
      const TaskId u = csr.succ[i];
      if (--pending[u] == 0) try_start(g.stream(u), now);
    }
    try_start(s, now);
  }
  if (static_cast<size_t>(tl.events) != n) {
    for (size_t s = 0; s < streams; ++s) {
      if (head[s] == order_first[s + 1]) continue;
      const TaskId t = order[head[s]];
      return Error{"deadlock: task '" + task_name(g.label(t)) + "' on rank " +
                   std::to_string(g.stream_rank(static_cast<StreamId>(s))) + " stream " +
                   stream_name(g.stream_kind(static_cast<StreamId>(s))) + " never becomes ready"};
    }
  }
  return tl;
}

}  // namespace parallax
