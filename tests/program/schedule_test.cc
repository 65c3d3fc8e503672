#include "program/schedule.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "planner/memory_model.h"
#include "simulator/engine.h"

namespace parallax {
namespace {

// Runs the schedule's op lists as a task graph with the given per-chunk times and instant
// transfers: F waits for F on the previous virtual stage, B for B on the next.
Result<Timeline> run_uniform(Schedule s, int64_t p, int64_t m, int64_t v, double f, double b, double w) {
  const auto ops = pipeline_ops(s, p, m, v);
  TaskGraph g;
  std::map<std::tuple<int, int, int, int>, TaskId> id;  // (stage, kind, mb, chunk)
  for (int64_t st = 0; st < p; ++st) {
    const StreamId stream = g.add_stream(static_cast<int32_t>(st), StreamKind::kCompute);
    for (const PipelineOp& op : ops[st]) {
      const double dur = op.kind == OpKind::kForward ? f : op.kind == OpKind::kBackward ? b : w;
      id[{int(st), int(op.kind), op.micro_batch, op.chunk}] =
          g.add_task(stream, dur);
    }
  }
  for (int64_t st = 0; st < p; ++st) {
    for (const PipelineOp& op : ops[st]) {
      const int64_t vs = virtual_stage(st, op.chunk, p);
      const TaskId self = id[{int(st), int(op.kind), op.micro_batch, op.chunk}];
      if (op.kind == OpKind::kForward && vs > 0)
        g.add_dependency(id[{int((vs - 1) % p), 0, op.micro_batch, int((vs - 1) / p)}], self);
      if (op.kind == OpKind::kBackward && vs < p * v - 1)
        g.add_dependency(id[{int((vs + 1) % p), 1, op.micro_batch, int((vs + 1) / p)}], self);
      if (op.kind == OpKind::kBackward && vs == p * v - 1)
        g.add_dependency(id[{int(st), 0, op.micro_batch, op.chunk}], self);
    }
  }
  return run_tasks(g);
}

// Every (mb, chunk) appears once as F and once as B (and W for ZB-H1), F before B before W.
TEST(Schedule, EveryOpOnceInDependencyOrder) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    for (int64_t p : {1, 2, 3, 4, 8}) {
      for (int64_t m : {1, 2, 3, 4, 8, 16, 24}) {
        const int64_t v = s == Schedule::kInterleaved ? 3 : 1;
        if (s == Schedule::kInterleaved && (p < 2 || m % p != 0)) continue;
        const auto ops = pipeline_ops(s, p, m, v);
        ASSERT_EQ(ops.size(), static_cast<size_t>(p));
        for (const auto& stage : ops) {
          std::set<std::tuple<int, int, int>> seen;
          for (const PipelineOp& op : stage) {
            EXPECT_TRUE(seen.insert({int(op.kind), op.micro_batch, op.chunk}).second);
            if (op.kind != OpKind::kForward) {
              EXPECT_TRUE(seen.count({int(op.kind) - 1, op.micro_batch, op.chunk})) << "order";
            }
          }
          EXPECT_EQ(seen.size(), static_cast<size_t>(m * v * (splits_weight_gradients(s) ? 3 : 2)));
        }
      }
    }
  }
}

// No deadlock for any p, m, v, with uneven op times too.
TEST(Schedule, NoDeadlock) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1})
    for (int64_t p : {1, 2, 3, 4, 5, 8})
      for (int64_t m : {1, 2, 4, 5, 8, 16, 32})
        for (int64_t v : {1, 2, 4}) {
          if ((s == Schedule::kInterleaved) != (v > 1) || (v > 1 && (p < 2 || m % p != 0))) continue;
          Result<Timeline> tl = run_uniform(s, p, m, v, 1.0, 2.3, 0.7);
          EXPECT_TRUE(tl.ok()) << schedule_name(s) << " p" << p << " m" << m << " v" << v << ": " << tl.error();
        }
}

// VALIDATION.md section 3: in flight on stage i is GPipe m, 1F1B min(p - i, m); interleaved
// Megatron's warm-up; ZB-H1 keeps 1F1B's peak, min(p, m), on every stage.
TEST(Schedule, InFlightMatchesClosedForms) {
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {1, 3, 8, 16}) {
      for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1}) {
        const auto ops = pipeline_ops(s, p, m, 1);
        for (int64_t i = 0; i < p; ++i) {
          const int64_t expected = s == Schedule::kGpipe ? m : s == Schedule::kZbH1 ? std::min(p, m) : std::min(p - i, m);
          EXPECT_EQ(max_in_flight(ops[i], s), expected) << schedule_name(s) << " p" << p << " m" << m << " i" << i;
          EXPECT_EQ(max_in_flight(ops[i], s), in_flight_chunk_passes(s, p, m, 1, i));
        }
      }
      if (m % p != 0) continue;
      const auto ops = pipeline_ops(Schedule::kInterleaved, p, m, 2);
      for (int64_t i = 0; i < p; ++i)
        EXPECT_EQ(max_in_flight(ops[i], Schedule::kInterleaved), in_flight_chunk_passes(Schedule::kInterleaved, p, m, 2, i));
    }
}

// Uniform stages reproduce the closed forms exactly: GPipe and 1F1B take (m + p - 1)(F + B);
// interleaved with v chunks of (F + B)/v each takes (m + (p - 1)/v)(F + B).
TEST(Schedule, UniformStagesReproduceBubbleClosedForms) {
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {8, 16, 32}) {
      for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
        Result<Timeline> tl = run_uniform(s, p, m, 1, 1.0, 2.0, 0.0);
        ASSERT_TRUE(tl.ok());
        EXPECT_DOUBLE_EQ(tl->makespan_s, double(m + p - 1) * 3.0) << schedule_name(s) << " p" << p << " m" << m;
      }
      for (int64_t v : {2, 4}) {
        Result<Timeline> tl = run_uniform(Schedule::kInterleaved, p, m, v, 1.0 / v, 2.0 / v, 0.0);
        ASSERT_TRUE(tl.ok());
        EXPECT_NEAR(tl->makespan_s, (double(m) + double(p - 1) / v) * 3.0, 1e-9) << "p" << p << " m" << m << " v" << v;
      }
    }
}

// ZB-H1 as Qi et al. build it (Section 3.1): for m >= p the step takes m(F + B + W) +
// (p - 1)(F + B - W). With F = B = W = 1 that is a bubble of p - 1, a third of 1F1B's
// (p - 1)(F + B + W) = 3(p - 1); e.g. p 4, m 16: 48 + 3 = 51 against 1F1B's 48 + 9 = 57.
TEST(Schedule, ZeroBubbleH1BubbleIsAThirdOf1F1B) {
  for (int64_t p : {2, 3, 4, 8})
    for (int64_t m : {8, 16, 20, 32}) {
      if (m < p) continue;
      Result<Timeline> zb = run_uniform(Schedule::kZbH1, p, m, 1, 1.0, 1.0, 1.0);
      Result<Timeline> base = run_uniform(Schedule::k1F1B, p, m, 1, 1.0, 2.0, 0.0);
      ASSERT_TRUE(zb.ok() && base.ok());
      EXPECT_DOUBLE_EQ(base->makespan_s - 3.0 * m, 3.0 * (p - 1));
      EXPECT_DOUBLE_EQ(zb->makespan_s - 3.0 * m, double(p - 1)) << "p" << p << " m" << m;
    }
}

// Unequal passes, F 1, B 1.2, W 0.8 over p 4, m 64: the bubble is (p - 1)(F + B - W) = 3 x 1.4 =
// 4.2, below 1F1B's (p - 1)(F + B + W) = 9. The order does not depend on the durations.
TEST(Schedule, ZeroBubbleH1WithUnequalPasses) {
  Result<Timeline> zb = run_uniform(Schedule::kZbH1, 4, 64, 1, 1.0, 1.2, 0.8);
  ASSERT_TRUE(zb.ok());
  EXPECT_NEAR(zb->makespan_s - 64 * 3.0, 4.2, 1e-9);
}

// Stage i of ZB-H1 holds back the W of its first i backwards (hand-checked for p 3, m 4).
TEST(Schedule, ZeroBubbleH1OrderByHand) {
  auto text = [](const std::vector<PipelineOp>& ops) {
    std::string out;
    for (const PipelineOp& o : ops) {
      out += o.kind == OpKind::kForward ? 'F' : o.kind == OpKind::kBackward ? 'B' : 'W';
      out += std::to_string(o.micro_batch);
      out += ' ';
    }
    return out;
  };
  const auto ops = pipeline_ops(Schedule::kZbH1, 3, 4, 1);
  EXPECT_EQ(text(ops[0]), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3 ");
  EXPECT_EQ(text(ops[1]), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3 ");
  EXPECT_EQ(text(ops[2]), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 ");
}

}  // namespace
}  // namespace parallax
