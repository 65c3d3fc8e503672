#include "simulator/trace_compare.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

nlohmann::json ev(int pid, int tid, const char* name, double ts_us, double dur_us) {
  return {{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", ts_us}, {"dur", dur_us}};
}

// Predicted: F 10 us, B 20 us, then a 5 us DP reduction nothing hides. Measured: F 12, B 18,
// DP 8 of which 2 overlap the backward; an extra recv has no predicted counterpart.
TEST(Compare, MatchesByStageAndName) {
  const nlohmann::json predicted = {
      {"traceEvents", {ev(0, 0, "F mb=0 chunk=0", 0, 10), ev(0, 0, "B mb=0 chunk=0", 10, 20), ev(0, 4, "allreduce dp bucket=0", 30, 5)}},
      {"metadata", {{"step_time_s", 35e-6}, {"peak_memory_bytes", 100}}}};
  const nlohmann::json measured = {
      {"traceEvents", {ev(0, 0, "F mb=0 chunk=0", 0, 12), ev(0, 0, "B mb=0 chunk=0", 12, 18), ev(0, 4, "allreduce dp bucket=0", 28, 8),
                       ev(0, 3, "recv pp mb=0", 0, 1)}},
      {"metadata", {{"step_time_s", 40e-6}, {"peak_memory_bytes", 80}}}};
  Result<Comparison> c = compare_traces(predicted, measured);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_DOUBLE_EQ(c->predicted.step_time_s, 35e-6);
  EXPECT_NEAR(relative_error(c->predicted.step_time_s, c->measured.step_time_s), -0.125, 1e-12);
  EXPECT_EQ(c->ops.size(), 3u);
  EXPECT_EQ(c->unmatched_predicted, 0);
  EXPECT_EQ(c->unmatched_measured, 1);
  EXPECT_NEAR(c->predicted.exposed_comm_s, 5e-6, 1e-12);
  EXPECT_NEAR(c->measured.exposed_comm_s, 6e-6, 1e-12);  // dp 28-36 minus compute to 30; recv hidden by F
  ASSERT_EQ(c->kinds.size(), 3u);  // B, F, dp
  EXPECT_EQ(c->kinds[0].kind, "B");
  EXPECT_NEAR(c->kinds[0].predicted_median_s, 20e-6, 1e-12);
  EXPECT_NEAR(c->kinds[0].measured_median_s, 18e-6, 1e-12);
}

// Traces of different models or plans, or swapped, are refused with one line naming what differs.
TEST(Compare, RefusesTracesOfDifferentRuns) {
  const nlohmann::json plan = {{"tp", 1}, {"pp", 2}, {"dp", 1}, {"zero", 0}, {"micro_batch", 1}, {"global_batch", 4}};
  auto trace = [&](const char* source, const char* model, int pp) {
    nlohmann::json p = plan;
    p["pp"] = pp;
    return nlohmann::json{{"traceEvents", {ev(0, 0, "F mb=0 chunk=0", 0, 10)}},
                          {"metadata", {{"source", source}, {"model", model}, {"plan", p}}}};
  };
  const nlohmann::json sim = trace("parallax simulate", "gpt", 2), run = trace("parallax train", "gpt", 2);
  EXPECT_TRUE(compare_traces(sim, run).ok());
  EXPECT_EQ(compare_traces(run, sim).error(),
            "the predicted trace comes from 'parallax train' and the measured one from 'parallax simulate': swap "
            "--predicted and --measured");
  EXPECT_EQ(compare_traces(sim, trace("parallax train", "llama", 2)).error(),
            "the traces are of different models: predicted \"gpt\", measured \"llama\"");
  EXPECT_EQ(compare_traces(sim, trace("parallax train", "gpt", 4)).error(),
            "the traces are of different plans: pp 2 predicted, 4 measured");
}

// Bubble as StepReport defines it. Two stages; the pipeline phase ends with stage 0's B at 40 us.
// Stage 0 does F/B for 10 + 20 = 30 us: idle 10/40. Stage 1 does 10 + 10 = 20 us: idle 20/40. The
// DP reduction after 40 us and the optimizer are outside the phase. Mean: (0.25 + 0.5) / 2 = 0.375.
TEST(Compare, BubbleIsTheIdleShareOfThePipelinePhase) {
  const nlohmann::json t = {
      {"traceEvents", {ev(0, 0, "F mb=0 chunk=0", 0, 10), ev(1, 0, "F mb=0 chunk=0", 10, 10),
                       ev(1, 0, "B mb=0 chunk=0", 20, 10), ev(0, 0, "B mb=0 chunk=0", 20, 20),
                       ev(0, 4, "allreduce dp bucket=0", 40, 5), ev(0, 0, "optimizer", 45, 5)}}};
  Result<Comparison> c = compare_traces(t, t);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_DOUBLE_EQ(c->predicted.bubble_fraction, 0.375);
}

TEST(Compare, MalformedTraces) {
  EXPECT_EQ(compare_traces(nlohmann::json::object(), nlohmann::json::object()).error(),
            "predicted trace: missing 'traceEvents' array");
  const nlohmann::json ok = {{"traceEvents", {ev(0, 0, "F", 0, 1)}}};
  const nlohmann::json bad = {{"traceEvents", {{{"ph", "X"}, {"pid", 0}}}}};
  EXPECT_EQ(compare_traces(ok, bad).error(), "measured trace: an event lacks name, pid, ts or dur");
}

}  // namespace
}  // namespace parallax
