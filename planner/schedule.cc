#include "planner/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>

namespace parallax {

namespace {

using Ops = std::vector<PipelineOp>;

PipelineOp op(OpKind k, int64_t mb, int64_t chunk) {
  return {k, static_cast<int32_t>(mb), static_cast<int32_t>(chunk)};
}

Ops gpipe(int64_t m) {
  Ops ops;
  for (int64_t mb = 0; mb < m; ++mb) ops.push_back(op(OpKind::kForward, mb, 0));
  for (int64_t mb = m - 1; mb >= 0; --mb) ops.push_back(op(OpKind::kBackward, mb, 0));
  return ops;
}

Ops one_f_one_b(int64_t pp, int64_t m, int64_t stage) {
  const int64_t warmup = std::min(pp - stage - 1, m);
  Ops ops;
  for (int64_t mb = 0; mb < warmup; ++mb) ops.push_back(op(OpKind::kForward, mb, 0));
  for (int64_t j = 0; j < m - warmup; ++j) {
    ops.push_back(op(OpKind::kForward, warmup + j, 0));
    ops.push_back(op(OpKind::kBackward, j, 0));
  }
  for (int64_t mb = m - warmup; mb < m; ++mb) ops.push_back(op(OpKind::kBackward, mb, 0));
  return ops;
}

// Megatron-LM's interleaved order: the k-th forward of a stage runs chunk (k / p) % v of micro-batch
// (k / (p v)) p + k % p; backwards walk the chunks in reverse.
Ops interleaved(int64_t pp, int64_t m, int64_t v, int64_t stage) {
  const int64_t total = m * v;
  const int64_t warmup = std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
  auto mb_of = [&](int64_t k) { return (k / (pp * v)) * pp + k % pp; };
  auto fwd = [&](int64_t k) { return op(OpKind::kForward, mb_of(k), (k / pp) % v); };
  auto bwd = [&](int64_t k) { return op(OpKind::kBackward, mb_of(k), v - 1 - (k / pp) % v); };
  Ops ops;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  for (int64_t j = 0; j < total - warmup; ++j) {
    ops.push_back(fwd(warmup + j));
    ops.push_back(bwd(j));
  }
  for (int64_t k = total - warmup; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

// ZB-H1: list-schedules every stage with the given F, B and W durations and records the order
// (with 1/1/1 the setting of Qi et al.). A free stage runs, by priority, a B whose gradient has
// arrived, then an F whose input has arrived if it holds fewer than p micro-batches without W
// (1F1B's peak activation budget), then its oldest pending W. W passes thereby drift into what
// would be 1F1B's bubbles. Event-driven: time jumps from one completion or arrival to the next.
std::vector<Ops> zero_bubble_h1(int64_t pp, int64_t m, double f, double b, double w) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  struct Stage {
    int64_t next_f = 0, held = 0;                          // held: F done, W not yet
    std::vector<std::pair<double, int64_t>> arrivals;      // gradients: (time, mb)
    std::deque<int64_t> pending_w;
    std::vector<double> f_done;                            // when F(mb) finishes
    double busy_until = 0;
    Ops ops;
  };
  std::vector<Stage> st(pp);
  for (Stage& s : st) s.f_done.assign(m, kNever);
  int64_t remaining = 3 * pp * m;
  for (double now = 0; remaining > 0;) {
    for (int64_t i = 0; i < pp; ++i) {
      Stage& s = st[i];
      if (s.busy_until > now) continue;
      auto ready_b = std::find_if(s.arrivals.begin(), s.arrivals.end(), [&](auto& a) { return a.first <= now; });
      const bool f_ready = s.next_f < m && (i == 0 || st[i - 1].f_done[s.next_f] <= now);
      double dur = 0;
      if (ready_b != s.arrivals.end()) {
        const int64_t mb = ready_b->second;
        s.arrivals.erase(ready_b);
        s.ops.push_back(op(OpKind::kBackward, mb, 0));
        s.pending_w.push_back(mb);
        dur = b;
        if (i > 0) st[i - 1].arrivals.push_back({now + dur, mb});
      } else if (f_ready && s.held < pp) {
        const int64_t mb = s.next_f++;
        s.ops.push_back(op(OpKind::kForward, mb, 0));
        ++s.held;
        dur = f;
        s.f_done[mb] = now + dur;
        if (i == pp - 1) s.arrivals.push_back({now + dur, mb});
      } else if (!s.pending_w.empty()) {
        s.ops.push_back(op(OpKind::kWeight, s.pending_w.front(), 0));
        s.pending_w.pop_front();
        --s.held;
        dur = w;
      } else {
        continue;
      }
      s.busy_until = now + dur;
      --remaining;
    }
    double next = kNever;  // the earliest completion or arrival after now
    for (int64_t i = 0; i < pp; ++i) {
      const Stage& s = st[i];
      if (s.busy_until > now) next = std::min(next, s.busy_until);
      for (const auto& a : s.arrivals)
        if (a.first > now) next = std::min(next, a.first);
      if (i > 0 && s.next_f < m && st[i - 1].f_done[s.next_f] > now) next = std::min(next, st[i - 1].f_done[s.next_f]);
    }
    if (next == kNever) break;  // nothing left can happen (remaining == 0)
    now = next;
  }
  std::vector<Ops> out;
  for (Stage& s : st) out.push_back(std::move(s.ops));
  return out;
}

}  // namespace

bool splits_weight_gradients(Schedule s) { return s == Schedule::kZbH1; }

std::vector<std::vector<PipelineOp>> pipeline_ops(Schedule s, int64_t pp, int64_t m, int64_t v, double f_time,
                                                  double b_time, double w_time) {
  if (s == Schedule::kZbH1) return zero_bubble_h1(pp, m, f_time, b_time, w_time);
  std::vector<Ops> out;
  for (int64_t stage = 0; stage < pp; ++stage) {
    switch (s) {
      case Schedule::kGpipe: out.push_back(gpipe(m)); break;
      case Schedule::k1F1B: out.push_back(one_f_one_b(pp, m, stage)); break;
      case Schedule::kInterleaved: out.push_back(interleaved(pp, m, v, stage)); break;
      case Schedule::kZbH1: break;
    }
  }
  return out;
}

int64_t max_in_flight(const std::vector<PipelineOp>& ops, Schedule s) {
  const OpKind release = splits_weight_gradients(s) ? OpKind::kWeight : OpKind::kBackward;
  int64_t held = 0, peak = 0;
  for (const PipelineOp& o : ops) {
    if (o.kind == OpKind::kForward) peak = std::max(peak, ++held);
    if (o.kind == release) --held;
  }
  return peak;
}

}  // namespace parallax
