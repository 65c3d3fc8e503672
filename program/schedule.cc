#include "program/schedule.h"

#include <algorithm>
#include <deque>

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

// ZB-H1 (see schedule.h): 1F1B's order with the W of stage i's first i backwards held back.
Ops zero_bubble_h1(int64_t pp, int64_t m, int64_t stage) {
  const int64_t warmup = std::min(pp - stage - 1, m);
  Ops ops;
  std::deque<int64_t> pending;  // backwards whose W has not run
  auto backward = [&](int64_t mb) {
    ops.push_back(op(OpKind::kBackward, mb, 0));
    pending.push_back(mb);
    if (static_cast<int64_t>(pending.size()) > stage) {
      ops.push_back(op(OpKind::kWeight, pending.front(), 0));
      pending.pop_front();
    }
  };
  for (int64_t mb = 0; mb < warmup; ++mb) ops.push_back(op(OpKind::kForward, mb, 0));
  for (int64_t j = 0; j < m - warmup; ++j) {
    ops.push_back(op(OpKind::kForward, warmup + j, 0));
    backward(j);
  }
  for (int64_t mb = m - warmup; mb < m; ++mb) backward(mb);
  for (int64_t mb : pending) ops.push_back(op(OpKind::kWeight, mb, 0));
  return ops;
}

}  // namespace

bool splits_weight_gradients(Schedule s) { return s == Schedule::kZbH1; }

bool releases_activations(OpKind kind, Schedule s) {
  return kind == (splits_weight_gradients(s) ? OpKind::kWeight : OpKind::kBackward);
}

std::vector<std::vector<PipelineOp>> pipeline_ops(Schedule s, int64_t pp, int64_t m, int64_t v) {
  std::vector<Ops> out;
  for (int64_t stage = 0; stage < pp; ++stage) {
    switch (s) {
      case Schedule::kGpipe: out.push_back(gpipe(m)); break;
      case Schedule::k1F1B: out.push_back(one_f_one_b(pp, m, stage)); break;
      case Schedule::kInterleaved: out.push_back(interleaved(pp, m, v, stage)); break;
      case Schedule::kZbH1: out.push_back(zero_bubble_h1(pp, m, stage)); break;
    }
  }
  return out;
}

int64_t max_in_flight(const std::vector<PipelineOp>& ops, Schedule s) {
  int64_t held = 0, peak = 0;
  for (const PipelineOp& o : ops) {
    if (o.kind == OpKind::kForward) peak = std::max(peak, ++held);
    if (releases_activations(o.kind, s)) --held;
  }
  return peak;
}

}  // namespace parallax
