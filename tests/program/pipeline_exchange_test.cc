// The GPU trainer's send/receive groups, derived from the step program: which groups a stage
// issues, and that no schedule can deadlock when every transfer is a rendezvous.
#include "program/pipeline_exchange.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

StepProgram program(Schedule s, int pp, int m) {
  Plan p;
  p.pp = pp;
  p.global_batch = m;
  p.seq_len = 16;
  p.schedule = s;
  return build_step_program(load_model(std::string(PARALLAX_SOURCE_DIR) + "/tests/data/tiny-gpt.json").value(), p);
}

// 1F1B, pp 2, 2 micro-batches. Stage 0 runs F0 F1 B0 B1: F1 first sends F0's output alone; B0's
// receive goes with the send of F1's output; B1's receive alone. Stage 1 runs F0 B0 F1 B1:
// receive F0; send B0's gradient with F1's receive; the last send before the optimizer.
TEST(PipelineExchanges, OneF1BTwoStagesByHand) {
  const StepProgram prog = program(Schedule::k1F1B, 2, 2);
  EXPECT_EQ(pipeline_exchanges(prog.stages[0]),
            (std::vector<P2pGroup>{{1, 0, -1, -1}, {1, 1, 1, 0}, {-1, -1, 1, 1}}));
  EXPECT_EQ(pipeline_exchanges(prog.stages[1]),
            (std::vector<P2pGroup>{{-1, -1, 0, 0}, {0, 0, 0, 1}, {0, 1, -1, -1}}));
}

// Every schedule a GPU runs pairs up for p 1-8 and m 1-20, ZB-H1 included: its held-back W
// passes would otherwise split a same-neighbour pair into two groups that wait on each other.
TEST(PipelineExchanges, NoScheduleDeadlocks) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 20; ++m) {
        const Status st = check_exchanges(program(s, pp, m));
        EXPECT_TRUE(st.ok()) << st.error();
      }
}

// ZB-H1, pp 3, m 4, stage 1 runs F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3: B1's gradient to stage 0
// waits past W0 and goes with F3's receive from stage 0.
TEST(PipelineExchanges, ZbH1SendWaitsPastW) {
  const std::vector<P2pGroup> s1 = pipeline_exchanges(program(Schedule::kZbH1, 3, 4).stages[1]);
  ASSERT_GE(s1.size(), 7u);
  EXPECT_EQ(s1[6], (P2pGroup{0, 1, 0, 3}));
}

}  // namespace
}  // namespace parallax
