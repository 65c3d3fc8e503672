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

// Finish events keyed by (time, task id): task ids are assigned in a fixed order, so equal times
// always resolve the same way. The version tells a re-planned finish from a stale one.
struct Event {
  double time_s;
  TaskId task;
  int32_t version;
  bool operator>(const Event& o) const { return time_s != o.time_s ? time_s > o.time_s : task > o.task; }
};

// One run of a graph: streams start their next ready task, finishes come off a heap.
class EventLoop {
 public:
  explicit EventLoop(const TaskGraph& g)
      : g_(g), hot_(pack(g, succ_)), busy_(g.stream_count(), 0), contention_(g), progress_(g.stream_count()) {
    const size_t n = g.task_count(), streams = g.stream_count();
    // Program order of every stream: its tasks in the order they were added.
    order_first_.assign(streams + 1, 0);
    for (size_t t = 0; t < n; ++t) ++order_first_[hot_[t].stream + 1];
    for (size_t s = 0; s < streams; ++s) order_first_[s + 1] += order_first_[s];
    order_.resize(n);
    head_.assign(order_first_.begin(), order_first_.end() - 1);
    for (size_t t = 0; t < n; ++t) order_[head_[hot_[t].stream]++] = static_cast<TaskId>(t);
    std::copy(order_first_.begin(), order_first_.end() - 1, head_.begin());
    tl_.start_s.resize(n);
    tl_.finish_s.assign(n, -1);
    heap_.reserve(streams);
  }

  Result<Timeline> run(const std::function<std::string(TaskId)>& name) {
    for (size_t s = 0; s < g_.stream_count(); ++s) try_start(static_cast<StreamId>(s), 0.0);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Event>());
      const Event e = heap_.back();
      heap_.pop_back();
      finish(e);
    }
    if (static_cast<size_t>(tl_.events) != g_.task_count()) return deadlock(name);
    return std::move(tl_);
  }

 private:
  void push(double time_s, TaskId t, int32_t version) {
    heap_.push_back({time_s, t, version});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Event>());
  }

  // The rank's SM share changes by `delta`: its running compute task is re-planned.
  void reshare(int32_t rank, double delta, double now) {
    contention_.add(rank, delta);
    const StreamId c = contention_.compute_stream(rank);
    if (c < 0 || !busy_[c]) return;
    Progress& p = progress_[c];
    p.left_s = std::max(0.0, p.left_s - (now - p.since_s) * p.rate);
    p.since_s = now;
    p.rate = contention_.rate(rank);
    push(now + p.left_s / p.rate, order_[head_[c]], ++p.version);
  }

  void try_start(StreamId s, double now) {
    if (busy_[s] || head_[s] == order_first_[s + 1]) return;
    const TaskId t = order_[head_[s]];
    if (hot_[t].pending > 0) return;
    busy_[s] = 1;
    tl_.start_s[t] = now;
    const int32_t rank = g_.stream_rank(s);
    if (g_.stream_kind(s) == StreamKind::kCompute) {
      Progress& p = progress_[s];
      p = {hot_[t].duration_s, now, contention_.rate(rank), p.version + 1};
      push(now + p.left_s / p.rate, t, p.version);
    } else {
      push(now + hot_[t].duration_s, t, 0);
      if (g_.sm_share(t) > 0) reshare(rank, g_.sm_share(t), now);
    }
  }

  void finish(const Event& e) {
    const double now = e.time_s;
    const TaskId t = e.task;
    const StreamId s = hot_[t].stream;
    const bool compute = g_.stream_kind(s) == StreamKind::kCompute;
    if (compute && e.version != progress_[s].version) return;  // re-planned since
    tl_.finish_s[t] = now;
    ++tl_.events;
    busy_[s] = 0;
    ++head_[s];
    if (!compute && g_.sm_share(t) > 0) reshare(g_.stream_rank(s), -g_.sm_share(t), now);
    for (int32_t i = hot_[t].first_succ; i < hot_[t + 1].first_succ; ++i) {
      const TaskId u = succ_[i];
      if (--hot_[u].pending == 0) try_start(hot_[u].stream, now);
    }
    try_start(s, now);
    tl_.makespan_s = now;  // events come out in time order
  }

  Error deadlock(const std::function<std::string(TaskId)>& name) const {
    for (size_t s = 0; s < g_.stream_count(); ++s) {
      if (head_[s] == order_first_[s + 1]) continue;
      const TaskId t = order_[head_[s]];
      std::string what = std::to_string(t);
      if (name) what = '\'' + name(t), what += '\'';  // appended: GCC 12 misreads "'" + string (-Wrestrict)
      return Error{"deadlock: task " + what + " on rank " + std::to_string(g_.stream_rank(static_cast<StreamId>(s))) +
                   " stream " + stream_name(g_.stream_kind(static_cast<StreamId>(s))) + " never becomes ready"};
    }
    return Error{"deadlock"};
  }

  const TaskGraph& g_;
  std::vector<TaskId> succ_;
  std::vector<HotTask> hot_;
  std::vector<int32_t> order_first_, head_;
  std::vector<TaskId> order_;
  std::vector<char> busy_;
  Contention contention_;
  std::vector<Progress> progress_;  // of the task running on each compute stream
  std::vector<Event> heap_;
  Timeline tl_;
};

}  // namespace

Result<Timeline> run_tasks(const TaskGraph& g, const std::function<std::string(TaskId)>& name) {
  return EventLoop(g).run(name);
}

}  // namespace parallax
