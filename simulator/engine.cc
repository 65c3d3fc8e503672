#include "simulator/engine.h"

#include <algorithm>
#include <functional>

namespace parallax {

namespace {

// What the event loop touches per task, packed into one cache-friendly record.
struct HotTask {
  double duration_s;
  StreamId stream;
  int32_t pending;     // unfinished dependencies
  int32_t first_succ;  // successors: succ[first_succ .. next task's first_succ)
};

// Packs the tasks and their successors (compressed adjacency).
std::vector<HotTask> pack(const TaskGraph& g, std::vector<TaskId>& succ) {
  const size_t n = g.task_count();
  std::vector<HotTask> hot(n + 1);
  for (size_t t = 0; t < n; ++t) hot[t] = {g.duration_s(static_cast<TaskId>(t)), g.stream(static_cast<TaskId>(t)), 0, 0};
  hot[n] = {0, 0, 0, 0};
  for (const auto& [before, after] : g.dependencies()) {
    ++hot[before + 1].first_succ;
    ++hot[after].pending;
  }
  for (size_t t = 0; t < n; ++t) hot[t + 1].first_succ += hot[t].first_succ;
  succ.resize(g.dependencies().size());
  std::vector<int32_t> fill(n);
  for (size_t t = 0; t < n; ++t) fill[t] = hot[t].first_succ;
  for (const auto& [before, after] : g.dependencies()) succ[fill[before]++] = after;
  return hot;
}

// Compute streams slowed by the collectives running beside them on their rank.
class Contention {
 public:
  explicit Contention(const TaskGraph& g) {
    int32_t ranks = 0;
    for (size_t s = 0; s < g.stream_count(); ++s) ranks = std::max(ranks, g.stream_rank(static_cast<StreamId>(s)) + 1);
    compute_.assign(ranks, -1);
    share_.assign(ranks, 0.0);
    for (size_t s = 0; s < g.stream_count(); ++s)
      if (g.stream_kind(static_cast<StreamId>(s)) == StreamKind::kCompute) compute_[g.stream_rank(static_cast<StreamId>(s))] = static_cast<StreamId>(s);
  }
  StreamId compute_stream(int32_t rank) const { return compute_[rank]; }
  double rate(int32_t rank) const { return std::max(kMinComputeRate, 1.0 - share_[rank]); }
  void add(int32_t rank, double delta) { share_[rank] = std::max(0.0, share_[rank] + delta); }

 private:
  std::vector<StreamId> compute_;  // per rank
  std::vector<double> share_;      // SM share of the collectives running on the rank
};

// A compute task's progress: work left (seconds at full speed) as of `since_s`, at `rate`.
struct Progress {
  double left_s = 0, since_s = 0, rate = 1;
  int32_t version = 0;  // bumped on every re-plan; older finish events are stale
};

}  // namespace

Result<Timeline> run_tasks(const TaskGraph& g, const std::function<std::string(TaskId)>& name) {
  const size_t n = g.task_count(), streams = g.stream_count();
  std::vector<TaskId> succ;
  std::vector<HotTask> hot = pack(g, succ);

  // Program order of every stream: its tasks in the order they were added.
  std::vector<int32_t> order_first(streams + 1, 0);
  for (size_t t = 0; t < n; ++t) ++order_first[hot[t].stream + 1];
  for (size_t s = 0; s < streams; ++s) order_first[s + 1] += order_first[s];
  std::vector<TaskId> order(n);
  std::vector<int32_t> head(order_first.begin(), order_first.end() - 1);
  for (size_t t = 0; t < n; ++t) order[head[hot[t].stream]++] = static_cast<TaskId>(t);
  std::copy(order_first.begin(), order_first.end() - 1, head.begin());
  std::vector<char> busy(streams, 0);
  Contention contention(g);
  std::vector<Progress> progress(streams);  // of the task running on each compute stream

  Timeline tl;
  tl.start_s.resize(n);
  tl.finish_s.assign(n, -1);
  // Finish events keyed by (time, task id): task ids are assigned in a fixed order, so equal
  // times always resolve the same way. The version tells a re-planned finish from a stale one.
  struct Event {
    double time_s;
    TaskId task;
    int32_t version;
    bool operator>(const Event& o) const { return time_s != o.time_s ? time_s > o.time_s : task > o.task; }
  };
  std::vector<Event> heap;
  heap.reserve(streams);
  const auto later = std::greater<Event>();
  auto push = [&](double time_s, TaskId t, int32_t version) {
    heap.push_back({time_s, t, version});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  // The rank's SM share changes by `delta`: its running compute task is re-planned.
  auto reshare = [&](int32_t rank, double delta, double now) {
    contention.add(rank, delta);
    const StreamId c = contention.compute_stream(rank);
    if (c < 0 || !busy[c]) return;
    Progress& p = progress[c];
    p.left_s = std::max(0.0, p.left_s - (now - p.since_s) * p.rate);
    p.since_s = now;
    p.rate = contention.rate(rank);
    push(now + p.left_s / p.rate, order[head[c]], ++p.version);
  };

  auto try_start = [&](StreamId s, double now) {
    if (busy[s] || head[s] == order_first[s + 1]) return;
    const TaskId t = order[head[s]];
    if (hot[t].pending > 0) return;
    busy[s] = 1;
    tl.start_s[t] = now;
    const int32_t rank = g.stream_rank(s);
    if (g.stream_kind(s) == StreamKind::kCompute) {
      Progress& p = progress[s];
      p = {hot[t].duration_s, now, contention.rate(rank), p.version + 1};
      push(now + p.left_s / p.rate, t, p.version);
    } else {
      push(now + hot[t].duration_s, t, 0);
      if (g.sm_share(t) > 0) reshare(rank, g.sm_share(t), now);
    }
  };
  for (size_t s = 0; s < streams; ++s) try_start(static_cast<StreamId>(s), 0.0);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Event e = heap.back();
    heap.pop_back();
    const double now = e.time_s;
    const TaskId t = e.task;
    const StreamId s = hot[t].stream;
    const bool compute = g.stream_kind(s) == StreamKind::kCompute;
    if (compute && e.version != progress[s].version) continue;  // re-planned since
    tl.finish_s[t] = now;
    ++tl.events;
    busy[s] = 0;
    ++head[s];
    if (!compute && g.sm_share(t) > 0) reshare(g.stream_rank(s), -g.sm_share(t), now);
    for (int32_t i = hot[t].first_succ; i < hot[t + 1].first_succ; ++i) {
      const TaskId u = succ[i];
      if (--hot[u].pending == 0) try_start(hot[u].stream, now);
    }
    try_start(s, now);
    tl.makespan_s = now;  // events come out in time order
  }
  if (static_cast<size_t>(tl.events) != n) {
    for (size_t s = 0; s < streams; ++s) {
      if (head[s] == order_first[s + 1]) continue;
      const TaskId t = order[head[s]];
      const std::string what = name ? "'" + name(t) + "'" : std::to_string(t);
      return Error{"deadlock: task " + what + " on rank " +
                   std::to_string(g.stream_rank(static_cast<StreamId>(s))) + " stream " +
                   stream_name(g.stream_kind(static_cast<StreamId>(s))) + " never becomes ready"};
    }
  }
  return tl;
}

}  // namespace parallax
