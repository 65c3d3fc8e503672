// The GPU trainer's send/receive groups: which group comes before which op, and which schedules
// can run them without a deadlock when every transfer is a rendezvous.
#include "runtime/pipeline_exchange.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

// 1F1B, pp 2, 2 micro-batches. Stage 0 runs F0 F1 B0 B1: F0 receives nothing and sends nothing
// yet; F1 sends F0's output; B0 sends F1's output and receives B0's input gradient; B1 receives
// B1's gradient (B0's input gradient has nowhere to go on stage 0); the flush sends nothing.
TEST(PipelineExchanges, OneF1BTwoStagesByHand) {
  const auto ops = pipeline_ops(Schedule::k1F1B, 2, 2, 1);
  const std::vector<P2pGroup> s0 = pipeline_exchanges(ops[0], 0, 2);
  ASSERT_EQ(s0.size(), 5u);
  EXPECT_TRUE(s0[0].empty());
  EXPECT_EQ(s0[1], (P2pGroup{1, 0, -1, -1}));
  EXPECT_EQ(s0[2], (P2pGroup{1, 1, 1, 0}));
  EXPECT_EQ(s0[3], (P2pGroup{-1, -1, 1, 1}));
  EXPECT_TRUE(s0[4].empty());
  // Stage 1 runs F0 B0 F1 B1: receive F0; send B0's gradient with F1's receive; the flush sends B1's.
  const std::vector<P2pGroup> s1 = pipeline_exchanges(ops[1], 1, 2);
  ASSERT_EQ(s1.size(), 5u);
  EXPECT_EQ(s1[0], (P2pGroup{-1, -1, 0, 0}));
  EXPECT_TRUE(s1[1].empty());
  EXPECT_EQ(s1[2], (P2pGroup{0, 0, 0, 1}));
  EXPECT_TRUE(s1[3].empty());
  EXPECT_EQ(s1[4], (P2pGroup{0, 1, -1, -1}));
}

TEST(PipelineExchanges, GpipeAnd1F1BNeverDeadlock) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 20; ++m) EXPECT_TRUE(check_exchanges(s, pp, m).ok()) << check_exchanges(s, pp, m).error();
}

// The checker finds a real cycle: in ZB-H1 with 3 stages and 3 micro-batches stage 1 groups its
// send of F2 (to stage 2, round 1) with its receive of B0 (from stage 2, round 2), and stage 2
// takes F2 only in a later group than the one that sends B0. Should NCCL run round 1 first, both
// wait forever.
TEST(PipelineExchanges, ZbH1ThreeStagesDeadlocks) {
  const Status s = check_exchanges(Schedule::kZbH1, 3, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("would wait forever"), std::string::npos) << s.error();
}

TEST(PipelineExchanges, TwoStageZbH1PairsUp) {
  for (int m = 1; m <= 20; ++m) EXPECT_TRUE(check_exchanges(Schedule::kZbH1, 2, m).ok()) << m;
}

}  // namespace
}  // namespace parallax
