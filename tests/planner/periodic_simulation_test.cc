// simulate_report (the line through three short steps) against simulate_step (every event), on
// every schedule, uneven stages, CP, EP, ZeRO 1-3, hybrid sharding and the overlaps: the reports
// agree to rounding, and the fast path was taken.
#include <cmath>
#include <optional>

#include <gtest/gtest.h>

#include "planner/search.h"
#include "planner/simulation.h"

namespace parallax {
namespace {

void expect_near(double got, double want, const std::string& what) {
  EXPECT_LE(std::abs(got - want), 1e-9 * std::max(std::abs(want), 1e-12)) << what << ": " << got << " vs " << want;
}

void expect_same_report(const ModelSpec& m, const ClusterSpec& c, const Plan& p, const std::string& what,
                        std::optional<bool> extrapolates = true) {
  ASSERT_TRUE(check_plan(p, m, c.node.gpus).ok()) << what << ": " << check_plan(p, m, c.node.gpus).error();
  const Simulation full = simulate_step(m, c, p).value();
  const Simulation fast = simulate_report(m, c, p).value();
  if (extrapolates) {
    EXPECT_EQ(fast.extrapolated, *extrapolates) << what;
  }
  const StepReport &a = fast.report, &b = full.report;
  expect_near(a.step_time_s, b.step_time_s, what + " step");
  expect_near(a.pipeline_s, b.pipeline_s, what + " pipeline");
  expect_near(a.bubble_fraction, b.bubble_fraction, what + " bubble");
  expect_near(a.dp_exposed_s, b.dp_exposed_s, what + " dp exposed");
  expect_near(a.tp_exposed_s, b.tp_exposed_s, what + " tp exposed");
  expect_near(a.optimizer_s, b.optimizer_s, what + " optimizer");
  expect_near(a.mfu, b.mfu, what + " mfu");
  expect_near(a.peak_memory_bytes, b.peak_memory_bytes, what + " memory");
  for (double CommBytes::*f : {&CommBytes::tp, &CommBytes::pp, &CommBytes::dp, &CommBytes::cp, &CommBytes::ep})
    expect_near(a.comm_bytes_per_gpu.*f, b.comm_bytes_per_gpu.*f, what + " bytes");
  ASSERT_EQ(fast.stages.size(), full.stages.size());
  for (size_t s = 0; s < full.stages.size(); ++s) {
    expect_near(fast.stages[s].busy_s, full.stages[s].busy_s, what + " busy");
    expect_near(fast.stages[s].exposed_pp_s, full.stages[s].exposed_pp_s, what + " exposed pp");
    expect_near(fast.stages[s].exposed_dp_s, full.stages[s].exposed_dp_s, what + " exposed dp");
    EXPECT_EQ(fast.stages[s].peak_in_flight, full.stages[s].peak_in_flight) << what;
  }
}

Plan base(int64_t tp, int64_t pp, int64_t dp, Schedule s, int64_t v = 1) {
  Plan p;
  p.tp = tp, p.pp = pp, p.dp = dp, p.schedule = s, p.virtual_stages = v;
  p.micro_batch = 1, p.global_batch = 96 * dp, p.seq_len = 4096;
  p.sequence_parallel = tp > 1;
  p.zero = 1;
  return p;
}

TEST(PeriodicSimulation, EverySchedule) {
  const ModelSpec m = load_model("llama2-13b").value();
  const ClusterSpec c = load_cluster("dgx-h100").value();
  expect_same_report(m, c, base(2, 4, 2, Schedule::k1F1B), "1f1b");
  expect_same_report(m, c, base(2, 4, 2, Schedule::kGpipe), "gpipe");
  expect_same_report(m, c, base(2, 4, 2, Schedule::kZbH1), "zb-h1");
  expect_same_report(m, c, base(2, 4, 2, Schedule::kInterleaved, 2), "interleaved 2");
  expect_same_report(m, c, base(1, 2, 4, Schedule::kInterleaved, 5), "interleaved 5");
  Plan overlapped = base(2, 4, 2, Schedule::k1F1B);
  overlapped.execution.overlap_grad_reduce = overlapped.execution.overlap_param_gather = overlapped.execution.overlap_p2p = true;
  expect_same_report(m, c, overlapped, "overlaps");
  Plan uneven = base(1, 4, 2, Schedule::k1F1B);
  uneven.first_stage_layers = 7, uneven.last_stage_layers = 9;
  expect_same_report(m, c, uneven, "uneven stages");
  Plan recompute = base(4, 2, 1, Schedule::kZbH1);
  recompute.recompute = Recompute::kFull;
  expect_same_report(m, c, recompute, "zb-h1 full recompute");
}

TEST(PeriodicSimulation, ShardingContextAndExperts) {
  const ClusterSpec c = load_cluster("dgx-h100").value();
  const ModelSpec llama = load_model("llama2-13b").value();
  for (int zero : {0, 2, 3}) {
    Plan z = base(2, 2, 4, Schedule::k1F1B);
    z.zero = zero;
    expect_same_report(llama, c, z, "zero " + std::to_string(zero));
  }
  Plan hybrid = base(1, 1, 8, Schedule::k1F1B);
  hybrid.zero = 3, hybrid.dp_shard = 4;
  expect_same_report(llama, c, hybrid, "hybrid sharding");
  Plan cp = base(2, 2, 2, Schedule::k1F1B);
  cp.cp = 2;
  expect_same_report(llama, c, cp, "cp 2");
  const ModelSpec mixtral = load_model("mixtral-8x7b").value();
  Plan ep = base(2, 2, 4, Schedule::kInterleaved, 2);
  ep.ep = 4;
  expect_same_report(mixtral, c, ep, "ep 4 interleaved");
  ep.zero = 3, ep.schedule = Schedule::k1F1B, ep.virtual_stages = 1;
  expect_same_report(mixtral, c, ep, "ep 4 zero 3");
}

// An explicit layout (Megatron's --pipeline-model-parallel-layout): the even split written out
// prices exactly as the even plan; moving one layer between two middle stages' chunks moves one
// layer's time, mbs x (F + B + W + its host gap), from one to the other; the line through short
// steps agrees with every event.
TEST(PeriodicSimulation, PipelineLayouts) {
  const ModelSpec m = load_model("llama2-13b").value();  // 40 layers: 5 per chunk on 4 x 2 chunks
  const ClusterSpec c = load_cluster("dgx-h100").value();
  const Plan even = base(2, 4, 2, Schedule::kInterleaved, 2);
  Plan layout = even;
  layout.pipeline_layout.assign(8, 5);
  const Simulation a = simulate_step(m, c, even).value(), b = simulate_step(m, c, layout).value();
  EXPECT_EQ(a.report.step_time_s, b.report.step_time_s);
  EXPECT_EQ(a.report.peak_memory_bytes, b.report.peak_memory_bytes);
  for (size_t s = 0; s < a.stages.size(); ++s) EXPECT_EQ(a.stages[s].busy_s, b.stages[s].busy_s) << s;
  layout.pipeline_layout = {5, 4, 6, 5, 5, 5, 5, 5};  // stage 1's first chunk gives a layer to stage 2's
  const Simulation moved = simulate_step(m, c, layout).value();
  const double gone = a.stages[1].busy_s - moved.stages[1].busy_s, came = moved.stages[2].busy_s - a.stages[2].busy_s;
  EXPECT_GT(gone, 0);
  EXPECT_NEAR(gone, came, 1e-9 * a.stages[1].busy_s);
  EXPECT_NEAR(moved.stages[0].busy_s, a.stages[0].busy_s, 1e-9 * a.stages[0].busy_s);
  // Unequal chunks may settle later than 2 PP micro-batches (then the whole step is simulated):
  // either way the reports agree.
  expect_same_report(m, c, layout, "layout", std::nullopt);
  layout.pipeline_layout = {0, 6, 6, 6, 6, 6, 6, 4};  // the embedding's chunk holds no layer
  expect_same_report(m, c, layout, "layout with an empty chunk", std::nullopt);
}

// Too few micro-batches for a line: the whole step is simulated.
TEST(PeriodicSimulation, ShortStepsAreSimulatedWhole) {
  const ModelSpec m = load_model("llama2-13b").value();
  const ClusterSpec c = load_cluster("dgx-h100").value();
  Plan p = base(2, 4, 2, Schedule::k1F1B);
  p.global_batch = 8 * p.dp;
  const Simulation s = simulate_report(m, c, p).value();
  EXPECT_FALSE(s.extrapolated);
  EXPECT_EQ(s.report.step_time_s, simulate_step(m, c, p)->report.step_time_s);
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// The matrix (bench/planner_bench.cc BM_Matrix): in every cell the search ranks the same
// top 10, by the line through short steps and by every event of every candidate.
TEST(PeriodicSimulation, MatrixTopTenEqualsEveryEventSearch) {
  const ClusterSpec c = load_cluster("dgx-h100").value();
  for (const char* model : {"13b", "deepseek-v2-lite", "deepseek-v3", "gpt-1.3b", "gpt-1t", "gpt-22b", "gpt-530b", "gpt2",
                            "gpt3-175b", "llama2-13b", "llama2-70b", "llama2-7b", "llama3-70b", "llama3-8b",
                            "llama3.1-405b", "llama3.1-8b", "mistral-7b", "mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen2-7b"})
    for (int64_t gpus : {8, 64, 512, 4096, 16384}) {
      const ModelSpec m = load_model(model).value();
      SearchOptions o;
      o.gpus = gpus;
      o.seq_len = default_seq_len(m);
      o.global_batch = default_global_batch(o.seq_len, gpus);
      const Result<SearchResult> fast = search(m, c, o);
      o.every_event = true;
      const Result<SearchResult> full = search(m, c, o);
      ASSERT_EQ(fast.ok(), full.ok()) << model << " " << gpus;
      if (!fast.ok()) continue;
      ASSERT_EQ(fast->plans.size(), full->plans.size()) << model << " " << gpus;
      for (size_t i = 0; i < fast->plans.size(); ++i)
        EXPECT_EQ(plan_to_json(fast->plans[i].plan), plan_to_json(full->plans[i].plan)) << model << " on " << gpus << " rank " << i + 1;
    }
}

}  // namespace
}  // namespace parallax
