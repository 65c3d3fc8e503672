#include "simulator/engine.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace parallax {

namespace {

// What the event loop touches per task, packed into one cache-friendly record.
struct HotTask {
  double duration_s;
  StreamId stream;
  int32_t pending;     // unfinished dependencies
  int32_t first_succ;  // successors: succ[first_succ .. next task's first_succ)
  float sm_share;
};

// What it touches per stream: its program order order[head .. end), its rank, whether it is the
// rank's compute stream (slowed by contention) and whether a task runs on it.
struct HotStream {
  int32_t head, end;
  int32_t rank;
  bool compute, busy;
};

// Packs the tasks and their successors (compressed adjacency).
std::vector<HotTask> pack(const TaskGraph& g, std::vector<TaskId>& succ) {
  const size_t n = g.task_count();
  std::vector<HotTask> hot(n + 1);
  for (size_t t = 0; t < n; ++t) {
    const TaskId id = static_cast<TaskId>(t);
    hot[t] = {g.duration_s(id), g.stream(id), 0, 0, g.sm_share(id)};
  }
  hot[n] = {0, 0, 0, 0, 0};
  const std::vector<std::pair<TaskId, TaskId>>& edges = g.dependencies();
  for (const auto& [before, after] : edges) {
    ++hot[before + 1].first_succ;
    ++hot[after].pending;
  }
  for (size_t t = 0; t < n; ++t) hot[t + 1].first_succ += hot[t].first_succ;
  succ.resize(edges.size());
  // Filled in edge order with first_succ as the cursor, which leaves it at the next task's start.
  for (const auto& [before, after] : edges) succ[hot[before].first_succ++] = after;
  for (size_t t = n; t > 0; --t) hot[t].first_succ = hot[t - 1].first_succ;
  hot[0].first_succ = 0;
  return hot;
}

// A compute task's progress: work left (seconds at full speed) as of `since_s`, at `rate`.
struct Progress {
  double left_s = 0, since_s = 0, rate = 1;
  int32_t version = 0;  // bumped on every re-plan; older finish events are stale
};

// Finish events keyed by (time, task id): task ids are assigned in a fixed order, so equal times
// always resolve the same way. The version tells a re-planned finish from a stale one. Times are
// never negative, and the bits of non-negative doubles order as the doubles do, so the key is two
// integers: the time's bits, then the task and the version (which never decides: a task's stale
// and current events act the same in either order).
struct Event {
  uint64_t time_bits;
  uint64_t task_version;

  Event(double time_s, TaskId task, int32_t version)
      : task_version(static_cast<uint64_t>(static_cast<uint32_t>(task)) << 32 | static_cast<uint32_t>(version)) {
    time_s += 0.0;  // -0 to +0
    std::memcpy(&time_bits, &time_s, sizeof time_bits);
  }
  double time_s() const {
    double t;
    std::memcpy(&t, &time_bits, sizeof t);
    return t;
  }
  TaskId task() const { return static_cast<TaskId>(task_version >> 32); }
  int32_t version() const { return static_cast<int32_t>(static_cast<uint32_t>(task_version)); }
};

// A binary min-heap of events: the hole moves down by the earlier child, chosen without a branch
// (the loop's hottest code: which child is earlier is a coin toss to a branch predictor).
class EventHeap {
 public:
  void reserve(size_t n) { h_.reserve(n); }
  bool empty() const { return h_.empty(); }
  void push(const Event& e) {
    size_t i = h_.size();
    h_.push_back(e);
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!before(e, h_[parent])) break;
      h_[i] = h_[parent];
      i = parent;
    }
    h_[i] = e;
  }
  Event pop() {
    const Event top = h_[0];
    const Event last = h_.back();
    h_.pop_back();
    const size_t n = h_.size();
    if (n == 0) return top;
    size_t i = 0;
    for (size_t c = 1; c < n; c = 2 * i + 1) {
      if (c + 1 < n) c += before(h_[c + 1], h_[c]);
      if (!before(h_[c], last)) break;
      h_[i] = h_[c];
      i = c;
    }
    h_[i] = last;
    return top;
  }

 private:
  static bool before(const Event& a, const Event& b) {
    return (a.time_bits < b.time_bits) | ((a.time_bits == b.time_bits) & (a.task_version < b.task_version));
  }
  std::vector<Event> h_;
};

// One run of a graph: streams start their next ready task, finishes come off a heap.
class EventLoop {
 public:
  explicit EventLoop(const TaskGraph& g) : g_(g), hot_(pack(g, succ_)), progress_(g.stream_count()) {
    const size_t n = g.task_count(), streams = g.stream_count();
    // Program order of every stream: its tasks in the order they were added.
    streams_.resize(streams);
    int32_t ranks = 0;
    for (size_t s = 0; s < streams; ++s) {
      const StreamId id = static_cast<StreamId>(s);
      streams_[s] = {0, 0, g.stream_rank(id), g.stream_kind(id) == StreamKind::kCompute, false};
      ranks = std::max(ranks, streams_[s].rank + 1);
    }
    for (size_t t = 0; t < n; ++t) ++streams_[hot_[t].stream].end;
    int32_t at = 0;
    for (HotStream& st : streams_) st.head = at, at += st.end, st.end = st.head;
    order_.resize(n);
    for (size_t t = 0; t < n; ++t) order_[streams_[hot_[t].stream].end++] = static_cast<TaskId>(t);
    // Contention: per rank its compute stream and the SM share of the collectives running on it.
    compute_of_rank_.assign(ranks, -1);
    share_.assign(ranks, 0.0);
    reshared_.assign(ranks, false);
    for (size_t s = 0; s < streams; ++s)
      if (streams_[s].compute) compute_of_rank_[streams_[s].rank] = static_cast<StreamId>(s);
    tl_.start_s.resize(n);
    tl_.finish_s.assign(n, -1);
    heap_.reserve(2 * streams);
  }

  Result<Timeline> run(const std::function<std::string(TaskId)>& name) {
    for (size_t s = 0; s < streams_.size(); ++s) try_start(static_cast<StreamId>(s), 0.0);
    replan(0.0);
    while (!heap_.empty()) finish(heap_.pop());
    if (static_cast<size_t>(tl_.events) != g_.task_count()) return deadlock(name);
    return std::move(tl_);
  }

 private:
  double rate(int32_t rank) const { return std::max(kMinComputeRate, 1.0 - share_[rank]); }

  // The rank's SM share changes by `delta`; its running compute task is re-planned once the
  // instant's events are done (replan), so a collective that ends as the next one of its stream
  // starts with the same share re-plans nothing.
  void reshare(int32_t rank, double delta) {
    share_[rank] = std::max(0.0, share_[rank] + delta);
    if (!reshared_[rank]) reshared_[rank] = true, reshared_ranks_.push_back(rank);
  }

  void replan(double now) {
    for (int32_t rank : reshared_ranks_) {
      reshared_[rank] = false;
      const StreamId c = compute_of_rank_[rank];
      if (c < 0 || !streams_[c].busy || progress_[c].rate == rate(rank)) continue;
      Progress& p = progress_[c];
      p.left_s = std::max(0.0, p.left_s - (now - p.since_s) * p.rate);
      p.since_s = now;
      p.rate = rate(rank);
      heap_.push({now + p.left_s / p.rate, order_[streams_[c].head], ++p.version});
    }
    reshared_ranks_.clear();
  }

  void try_start(StreamId s, double now) {
    HotStream& st = streams_[s];
    if (st.busy || st.head == st.end) return;
    const TaskId t = order_[st.head];
    const HotTask& task = hot_[t];
    if (task.pending > 0) return;
    st.busy = true;
    tl_.start_s[t] = now;
    if (st.compute) {
      Progress& p = progress_[s];
      p = {task.duration_s, now, rate(st.rank), p.version + 1};
      heap_.push({now + p.left_s / p.rate, t, p.version});
    } else {
      heap_.push({now + task.duration_s, t, 0});
      if (task.sm_share > 0) reshare(st.rank, task.sm_share);
    }
  }

  void finish(const Event& e) {
    const double now = e.time_s();
    const TaskId t = e.task();
    const HotTask& task = hot_[t];
    const StreamId s = task.stream;
    HotStream& st = streams_[s];
    if (st.compute && e.version() != progress_[s].version) return;  // re-planned since
    tl_.finish_s[t] = now;
    ++tl_.events;
    st.busy = false;
    ++st.head;
    if (!st.compute && task.sm_share > 0) reshare(st.rank, -task.sm_share);
    for (int32_t i = task.first_succ, end = hot_[t + 1].first_succ; i < end; ++i) {
      const TaskId u = succ_[i];
      if (--hot_[u].pending == 0) try_start(hot_[u].stream, now);
    }
    try_start(s, now);
    replan(now);
    tl_.makespan_s = now;  // events come out in time order
  }

  Error deadlock(const std::function<std::string(TaskId)>& name) const {
    for (size_t s = 0; s < streams_.size(); ++s) {
      if (streams_[s].head == streams_[s].end) continue;
      const TaskId t = order_[streams_[s].head];
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
  std::vector<HotStream> streams_;
  std::vector<TaskId> order_;
  std::vector<StreamId> compute_of_rank_;  // per rank
  std::vector<double> share_;              // per rank: SM share of the collectives running on it
  std::vector<bool> reshared_;             // per rank: its share changed in this instant
  std::vector<int32_t> reshared_ranks_;    // those ranks
  std::vector<Progress> progress_;         // of the task running on each compute stream
  EventHeap heap_;
  Timeline tl_;
};

}  // namespace

Result<Timeline> run_tasks(const TaskGraph& g, const std::function<std::string(TaskId)>& name) {
  return EventLoop(g).run(name);
}

}  // namespace parallax
