#include "simulator/engine.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

int32_t f(int mb) { return mb; }  // a tag

// Two stages, two streams each. Hand-derived:
//   rank 0 compute: F0 [0, 2), F1 [2, 4)
//   rank 0 send:    S0 [2, 3) after F0, S1 [4, 5) after F1
//   rank 1 compute: G0 [3, 6) after S0, G1 [6, 9) after S1 and G0
TEST(Engine, HandDerivedTimes) {
  TaskGraph g;
  const StreamId c0 = g.add_stream(0, StreamKind::kCompute), s0 = g.add_stream(0, StreamKind::kPpSend);
  const StreamId c1 = g.add_stream(1, StreamKind::kCompute);
  const TaskId f0 = g.add_task(c0, 2, f(0)), f1 = g.add_task(c0, 2, f(1));
  const TaskId x0 = g.add_task(s0, 1, 100), x1 = g.add_task(s0, 1, 101);
  const TaskId g0 = g.add_task(c1, 3, f(0)), g1 = g.add_task(c1, 3, f(1));
  g.add_dependency(f0, x0);
  g.add_dependency(f1, x1);
  g.add_dependency(x0, g0);
  g.add_dependency(x1, g1);
  Result<Timeline> tl = run_tasks(g);
  ASSERT_TRUE(tl.ok()) << tl.error();
  EXPECT_EQ(tl->start_s[x0], 2);
  EXPECT_EQ(tl->start_s[x1], 4);
  EXPECT_EQ(tl->start_s[g0], 3);
  EXPECT_EQ(tl->finish_s[g0], 6);
  EXPECT_EQ(tl->start_s[g1], 6);  // its input arrived at 5, the stream frees at 6
  EXPECT_EQ(tl->makespan_s, 9);
  EXPECT_EQ(tl->events, 6);
}

// A collective holding a quarter of the SMs slows the compute beside it: the 10 s task runs at
// 0.75 while the 4 s collective runs (3 s of work done by t = 4), then the 7 s left at full
// speed: it ends at 11. Compute on another rank is not slowed.
TEST(Engine, CollectivesSlowTheComputeOfTheirRank) {
  TaskGraph g;
  const StreamId c0 = g.add_stream(0, StreamKind::kCompute), d0 = g.add_stream(0, StreamKind::kDp);
  const StreamId c1 = g.add_stream(1, StreamKind::kCompute);
  const TaskId work = g.add_task(c0, 10), comm = g.add_task(d0, 4, -1, 0.25f), other = g.add_task(c1, 10);
  Result<Timeline> tl = run_tasks(g);
  ASSERT_TRUE(tl.ok()) << tl.error();
  EXPECT_DOUBLE_EQ(tl->finish_s[comm], 4);
  EXPECT_DOUBLE_EQ(tl->finish_s[work], 11);
  EXPECT_DOUBLE_EQ(tl->finish_s[other], 10);
  EXPECT_EQ(tl->events, 3);
}

// A stream runs in program order even when a later task is ready first.
TEST(Engine, StreamsKeepProgramOrder) {
  TaskGraph g;
  const StreamId a = g.add_stream(0, StreamKind::kCompute), b = g.add_stream(1, StreamKind::kCompute);
  const TaskId slow = g.add_task(b, 5, f(0));
  const TaskId waits = g.add_task(a, 1, f(1));
  const TaskId free = g.add_task(a, 1, f(2));
  g.add_dependency(slow, waits);
  Result<Timeline> tl = run_tasks(g);
  ASSERT_TRUE(tl.ok());
  EXPECT_EQ(tl->start_s[waits], 5);
  EXPECT_EQ(tl->start_s[free], 6);
}

TEST(Engine, DeadlockIsAnError) {
  TaskGraph g;
  const StreamId a = g.add_stream(0, StreamKind::kCompute), b = g.add_stream(1, StreamKind::kCompute);
  const TaskId a0 = g.add_task(a, 1, f(0)), a1 = g.add_task(a, 1, f(1));
  const TaskId b0 = g.add_task(b, 1, f(0)), b1 = g.add_task(b, 1, f(1));
  g.add_dependency(b1, a0);  // a waits for b's second task, b for a's second: a cycle
  g.add_dependency(a1, b0);
  Result<Timeline> tl = run_tasks(g, [&](TaskId t) {
    std::string name = "T";
    return name += std::to_string(g.tag(t));
  });
  ASSERT_FALSE(tl.ok());
  EXPECT_EQ(tl.error(), "deadlock: task 'T0' on rank 0 stream compute never becomes ready");
}

// Ties at equal times resolve by insertion sequence, so repeated runs are identical.
TEST(Engine, Deterministic) {
  TaskGraph g;
  for (int r = 0; r < 4; ++r) {
    const StreamId s = g.add_stream(r, StreamKind::kCompute);
    for (int i = 0; i < 50; ++i) g.add_task(s, 1.0 + (i % 3) * 0.5, f(i));
  }
  for (TaskId t = 50; t < 200; ++t) g.add_dependency(t - 50, t);
  Result<Timeline> a = run_tasks(g), b = run_tasks(g);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->start_s, b->start_s);
  EXPECT_EQ(a->finish_s, b->finish_s);
}

}  // namespace
}  // namespace parallax
