// The GPU trainer's send/receive groups, derived from the step program: which groups a stage
// issues, and that no schedule can deadlock when every transfer is a rendezvous.
#include "runtime/pipeline_exchange.h"

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

TEST(PipelineExchanges, GpipeAnd1F1BNeverDeadlock) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 20; ++m) {
        const Status st = check_exchanges(program(s, pp, m));
        EXPECT_TRUE(st.ok()) << st.error();
      }
}

// ZB-H1 pairs up on two stages; from three stages on, the held-back W passes let a stage's
// grouped send wait on a neighbour that is one group behind, so the GPU runtime refuses it (the
// CPU runtime's sends never block and run it).
TEST(PipelineExchanges, ZbH1PairsUpOnTwoStages) {
  for (int m = 1; m <= 20; ++m) EXPECT_TRUE(check_exchanges(program(Schedule::kZbH1, 2, m)).ok()) << m;
  EXPECT_FALSE(check_exchanges(program(Schedule::kZbH1, 3, 4)).ok());
}

}  // namespace
}  // namespace parallax
