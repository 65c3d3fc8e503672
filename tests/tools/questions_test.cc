// The answers to the questions users ask of a ranking (issue 24): --train-tokens' arithmetic,
// --explain's terms and sentence, the Pareto frontier of --html's scatter, and the content of the
// two HTML pages. Values are derived by hand in the comments.
#include <gtest/gtest.h>

#include "planner/simulation.h"
#include "simulator/trace_compare.h"
#include "tools/explain.h"
#include "tools/report_html.h"
#include "tools/training_cost.h"

namespace parallax {
namespace {

constexpr double kGiB = 1073741824.0;

TEST(TrainTokens, AcceptsSuffixesAndPlainNumbers) {
  EXPECT_DOUBLE_EQ(*parse_token_count("15T"), 15e12);
  EXPECT_DOUBLE_EQ(*parse_token_count("1.5B"), 1.5e9);
  EXPECT_DOUBLE_EQ(*parse_token_count("300m"), 300e6);
  EXPECT_DOUBLE_EQ(*parse_token_count("7k"), 7000);
  EXPECT_DOUBLE_EQ(*parse_token_count("2e12"), 2e12);
  EXPECT_DOUBLE_EQ(*parse_token_count("4194304"), 4194304);
}

TEST(TrainTokens, RefusesGarbageNamingTheFlag) {
  for (const char* bad : {"", "abc", "15X", "T", "-5T", "0", "1e-3", "nan", "inf", " 15T", "15 T", "15TT", "0x10", "1e", "."}) {
    Result<double> r = parse_token_count(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' was accepted";
    EXPECT_NE(r.error().find("--train-tokens"), std::string::npos) << r.error();
  }
}

TEST(TrainTokens, DaysGpuHoursAndCostByHand) {
  // 1e12 tokens / (1000 x 1000 tokens per step) = 1e6 steps; x 8.64 s = 8.64e6 s = 100 days;
  // x 24 h x 64 GPUs = 153,600 GPU-hours; x $2 = $307,200.
  const TrainingCost t = training_cost(1e12, 1000, 1000, 8.64, 64, 2.0);
  EXPECT_DOUBLE_EQ(t.steps, 1e6);
  EXPECT_NEAR(t.days, 100, 1e-9);
  EXPECT_NEAR(t.gpu_hours, 153600, 1e-6);
  EXPECT_NEAR(t.cost_usd, 307200, 1e-6);
  // 15T tokens at 1024 x 4096 = 2^22 tokens per step: 15e12 / 4,194,304 = 3,576,278.69 steps;
  // x 10 s / 86,400 = 413.921 days; x 24 x 256 = 2,543,131.5 GPU-hours; no price, no cost.
  const TrainingCost u = training_cost(15e12, 1024, 4096, 10.0, 256, 0);
  EXPECT_NEAR(u.steps, 3576278.6869, 1e-3);
  EXPECT_NEAR(u.days, 413.92114, 1e-4);
  EXPECT_NEAR(u.gpu_hours, 2543131.5, 1);
  EXPECT_EQ(u.cost_usd, 0);
}

TEST(Explain, NamesTheTermsThatDecide) {
  // 13 s vs 14.5 s: bubble carries 1.0 s of the 1.5 s, exposed DP 0.5 s (over a quarter of 1.0).
  EXPECT_EQ(deciding_terms("plan 1", "plan 2", {{"compute", 10}, {"bubble", 2}, {"exposed DP", 1}},
                           {{"compute", 10}, {"bubble", 3}, {"exposed DP", 1.5}}, "s"),
            "Plan 1 is 1.500 s (10.3%) faster per step than plan 2: bubble 1.000 s shorter, exposed DP 0.500 s shorter.");
  // 14 s vs 12 s: plan 2 wins by 3 s of bubble, 1 s of PP given back (over a quarter of 2 s).
  EXPECT_EQ(deciding_terms("plan 1", "plan 2", {{"compute", 10}, {"bubble", 4}, {"pp", 0}},
                           {{"compute", 10}, {"bubble", 1}, {"pp", 1}}, "s"),
            "Plan 2 is 2.000 s (14.3%) faster per step than plan 1: bubble 3.000 s shorter, partly offset by pp 1.000 s longer.");
  // 30 vs 36 GiB: activations, 6 of 36 = 16.7%.
  EXPECT_EQ(deciding_terms("plan 1", "plan 3", {{"weights", 10 * kGiB}, {"activations", 20 * kGiB}},
                           {{"weights", 10 * kGiB}, {"activations", 26 * kGiB}}, "GiB"),
            "Plan 1 needs 6.0 GiB (16.7%) less memory per GPU than plan 3: activations 6.0 GiB less.");
  EXPECT_EQ(deciding_terms("plan 1", "plan 2", {{"compute", 10}}, {{"compute", 10.001}}, "s"),
            "Plan 1 and plan 2 take the same time per step (within 0.1%).");
}

// The terms of a real simulated plan add up to its step time and its peak memory.
TEST(Explain, TermsSumToStepAndPeak) {
  const ModelSpec m = *load_model(std::string(PARALLAX_SOURCE_DIR) + "/models/13b.json");
  const ClusterSpec c = *load_cluster(std::string(PARALLAX_SOURCE_DIR) + "/clusters/dgx-h100.json");
  Plan p;
  p.tp = 2, p.pp = 4, p.dp = 8, p.zero = 1, p.micro_batch = 1, p.seq_len = 4096, p.global_batch = 512;
  p.recompute = Recompute::kFull;
  ASSERT_TRUE(check_plan(p, m, c.node.gpus).ok());
  const Simulation sim = *simulate_report(m, c, p);
  const PlanTerms t = plan_terms(m, c, sim);
  double time = 0, memory = 0;
  for (const auto& [name, s] : t.time_s) {
    EXPECT_GE(s, 0) << name;
    time += s;
  }
  for (const auto& [name, b] : t.memory_bytes) memory += b;
  EXPECT_NEAR(time, sim.report.step_time_s, 1e-9 * sim.report.step_time_s);
  EXPECT_NEAR(memory, sim.report.peak_memory_bytes, 1e-6 * sim.report.peak_memory_bytes);
  EXPECT_GT(t.time_s[1].second, 0);  // full recompute re-runs the forward in the backward
  EXPECT_GT(t.time_s[2].second, 0);  // TP 2 has collectives on the critical path
}

TEST(Report, ParetoFrontierKeepsOnlyUnbeatenPoints) {
  // (time, memory): (2,4) is beaten by (2,3); (3,3) by (2,3); (5,2) by (4,1).
  std::vector<ReportPoint> points;
  for (const auto& [time, memory] : std::vector<std::pair<double, double>>{{1, 5}, {2, 3}, {2, 4}, {3, 3}, {4, 1}, {5, 2}})
    points.push_back({time, memory, 0, ""});
  EXPECT_EQ(pareto_frontier(points), (std::vector<size_t>{0, 1, 4}));
}

TEST(Report, PageHasTheTableAndEveryChart) {
  PlannerReport r;
  r.title = "Parallax: <test>";
  r.header = {"rank", "step_s"};
  r.rows = {{"1", "8.399"}};
  r.fitting = {{8.4, 50 * kGiB, 0, ""}, {9, 40 * kGiB, 0, ""}};
  r.ranked = {{8.399, 57 * kGiB, 1, "plan 1"}};
  r.best_timeline_svg = "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>";
  r.best_memory.weights = 20 * kGiB;
  r.hbm_bytes = 80 * kGiB;
  const std::string page = planner_report_html(r);
  for (const char* piece : {"<table class='ranked-plans'>", "<td>8.399</td>", "id='scatter'", "class='pareto-frontier'",
                            "class='ranked-point'", "id='timeline'", "id='memory-breakdown'", "class='axis x-axis'",
                            "class='legend'", "predicted step time (s)", "peak memory per GPU (GiB)", "&lt;test&gt;"})
    EXPECT_NE(page.find(piece), std::string::npos) << piece;
  EXPECT_EQ(page.find("<script"), std::string::npos);
}

TEST(CompareHtml, TablesAreHtmlAndChartsHaveAxes) {
  auto trace = [](const char* source, double scale) {
    nlohmann::json events = nlohmann::json::array();
    events.push_back({{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"name", "F mb=0 chunk=0"}, {"ts", 0}, {"dur", 100 * scale}});
    events.push_back({{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"name", "B mb=0 chunk=0"}, {"ts", 100 * scale}, {"dur", 200 * scale}});
    return nlohmann::json{{"traceEvents", events}, {"metadata", {{"source", source}, {"model", "m"}}}};
  };
  const nlohmann::json predicted = trace("parallax simulate", 1), measured = trace("parallax train", 1.1);
  const Comparison c = *compare_traces(predicted, measured);
  const std::string page = comparison_html(c, predicted, measured);
  for (const char* piece : {"<table class='summary'>", "<table class='kinds'>", "id='kind-chart'", "id='timeline-predicted'",
                            "id='timeline-measured'", "class='axis x-axis'", "class='legend'", "time in the step (ms)",
                            "<title>Parallax: predicted vs measured step</title>"})
    EXPECT_NE(page.find(piece), std::string::npos) << piece;
  EXPECT_EQ(page.find("<pre>"), std::string::npos);
  EXPECT_EQ(page.find("|---"), std::string::npos);
}

}  // namespace
}  // namespace parallax
