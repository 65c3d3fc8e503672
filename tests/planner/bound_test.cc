// The lower bound of planner/bound.h against the simulation: never above a simulated step, on
// every schedule, ZeRO stage, uneven stages, EP and the overlaps; and the search pruned by it ranks
// the same top 10 as simulating every candidate.
#include "planner/bound.h"

#include <gtest/gtest.h>

#include "planner/search.h"
#include "planner/simulation.h"

namespace parallax {
namespace {

// Every `stride`-th candidate of a search by the estimate (every candidate with stride 1).
std::vector<Plan> candidates(const ModelSpec& m, const ClusterSpec& c, int64_t gpus, size_t stride) {
  SearchOptions o;
  o.gpus = gpus;
  o.seq_len = default_seq_len(m);
  o.global_batch = default_global_batch(o.seq_len, gpus);
  o.simulate = false;
  o.top_k = 1'000'000;
  std::vector<Plan> out;
  const SearchResult r = search(m, c, o).value();
  for (size_t i = 0; i < r.plans.size(); i += stride) out.push_back(r.plans[i].plan);
  return out;
}

void expect_bound_holds(const std::string& model, int64_t gpus, size_t stride, bool overlaps) {
  const ClusterSpec c = load_cluster("dgx-h100").value();
  const ModelSpec m = load_model(model).value();
  int checked = 0;
  for (Plan p : candidates(m, c, gpus, stride)) {
    if (overlaps)
      p.execution.overlap_grad_reduce = p.execution.overlap_param_gather = p.execution.overlap_p2p = checked % 2 == 0;
    const Result<Simulation> sim = simulate_step(m, c, p);
    if (!sim.ok()) continue;
    const double bound = step_lower_bound_s(m, c, p);
    EXPECT_GT(bound, 0) << model << " " << plan_to_json(p).dump();
    EXPECT_LE(bound, sim->report.step_time_s) << model << " on " << gpus << ": " << plan_to_json(p).dump();
    ++checked;
  }
  EXPECT_GT(checked, 20) << model << " on " << gpus;
}

TEST(StepLowerBound, NeverAboveTheSimulatedStep) {
  expect_bound_holds("gpt2", 8, 1, false);           // every candidate of the cell
  expect_bound_holds("gpt2", 64, 1, true);           // every candidate, half with every overlap
  expect_bound_holds("llama2-13b", 64, 25, true);    // every schedule and ZeRO stage
  expect_bound_holds("mixtral-8x7b", 64, 40, false); // EP
  expect_bound_holds("deepseek-v2-lite", 512, 40, true);  // leading dense layers
  expect_bound_holds("llama3.1-405b", 512, 10, false);    // uneven stages, deep pipelines
}

// Pruned by the bound, the search ranks what simulating every candidate ranks.
TEST(StepLowerBound, SearchTopTenEqualsEveryCandidate) {
  const ClusterSpec c = load_cluster("dgx-h100").value();
  for (const auto& [model, gpus] : {std::pair{"gpt2", 64}, std::pair{"llama3-8b", 8}, std::pair{"gpt-1.3b", 512}}) {
    const ModelSpec m = load_model(model).value();
    SearchOptions o;
    o.gpus = gpus;
    o.seq_len = default_seq_len(m);
    o.global_batch = default_global_batch(o.seq_len, gpus);
    o.pruning = SearchOptions::Pruning::kBound;
    const SearchResult bounded = search(m, c, o).value();
    o.pruning = SearchOptions::Pruning::kNone;
    const SearchResult every = search(m, c, o).value();
    EXPECT_EQ(bounded.simulated + bounded.bounded, every.simulated) << model;
    ASSERT_EQ(bounded.plans.size(), every.plans.size()) << model;
    for (size_t i = 0; i < every.plans.size(); ++i)
      EXPECT_EQ(plan_to_json(bounded.plans[i].plan), plan_to_json(every.plans[i].plan)) << model << " rank " << i + 1;
  }
}

}  // namespace
}  // namespace parallax
