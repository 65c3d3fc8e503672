#include "planner/search.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }
ClusterSpec h100() { return load_cluster("dgx-h100").value(); }

SearchOptions options(int64_t gpus, int64_t batch, int64_t seq, size_t top, int threads) {
  SearchOptions o;
  o.gpus = gpus;
  o.global_batch = batch;
  o.seq_len = seq;
  o.top_k = top;
  o.threads = threads;
  return o;
}

// The README's example: Llama-2-13B on 64 H100s.
TEST(Search, RankingInvariantsFor13bOn64Gpus) {
  const ModelSpec m = load("13b");
  const ClusterSpec c = h100();
  Result<SearchResult> r = search(m, c, options(64, 1024, 4096, 50, 2));
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->plans.size(), 50u);
  for (size_t i = 0; i < r->plans.size(); ++i) {
    const RankedPlan& p = r->plans[i];
    EXPECT_EQ(p.plan.gpus(), 64);
    EXPECT_TRUE(check_plan(p.plan, m, 8).ok());
    EXPECT_TRUE(p.report.fits_in_memory);
    EXPECT_LE(p.report.peak_memory_bytes, c.gpu.hbm_bytes());
    EXPECT_GT(p.report.step_time_s, 0);
    EXPECT_GT(p.report.mfu, 0);
    EXPECT_LT(p.report.mfu, 1);
    if (i > 0) {
      EXPECT_FALSE(ranks_before(p, r->plans[i - 1])) << "not sorted at " << i;
    }
  }
  // Every configuration is either ranked-feasible or rejected for exactly one reason.
  int64_t rejected = 0;
  for (int64_t n : r->rejected) rejected += n;
  EXPECT_EQ(r->considered, r->feasible + rejected);
  EXPECT_GT(r->rejected[static_cast<size_t>(Rejection::kOutOfMemory)], 0);
  EXPECT_GT(r->rejected[static_cast<size_t>(Violation::kTpHeads)], 0);  // 40 heads: TP 16, 32, 64
}

TEST(Search, ResultDoesNotDependOnThreads) {
  const ModelSpec m = load("llama3-8b");
  Result<SearchResult> one = search(m, h100(), options(32, 512, 4096, 20, 1));
  Result<SearchResult> two = search(m, h100(), options(32, 512, 4096, 20, 2));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(one->considered, two->considered);
  EXPECT_EQ(one->rejected, two->rejected);
  ASSERT_EQ(one->plans.size(), two->plans.size());
  for (size_t i = 0; i < one->plans.size(); ++i) {
    EXPECT_EQ(plan_to_json(one->plans[i].plan), plan_to_json(two->plans[i].plan));
    EXPECT_EQ(one->plans[i].report.step_time_s, two->plans[i].report.step_time_s);
  }
}

TEST(Search, BestPlanIsNoSlowerThanAnyEnumeratedAlternative) {
  const ModelSpec m = load("llama2-7b");
  const ClusterSpec c = h100();
  Result<SearchResult> r = search(m, c, options(16, 256, 4096, 1, 2));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->plans.size(), 1u);
  // A hand-picked legal alternative: TP 2 x DP 8, ZeRO-1, selective recompute.
  Plan alt;
  alt.tp = 2;
  alt.dp = 8;
  alt.zero = 1;
  alt.micro_batch = 1;
  alt.global_batch = 256;
  alt.seq_len = 4096;
  alt.recompute = Recompute::kSelective;
  ASSERT_TRUE(check_plan(alt, m, 8).ok());
  const StepReport e = estimate_step(m, c, alt);
  ASSERT_TRUE(e.fits_in_memory);
  EXPECT_LE(r->plans[0].report.step_time_s, e.step_time_s);
}

TEST(Search, NothingFitsIsAnEmptyRankingNotAnError) {
  Result<SearchResult> r = search(load("llama3.1-405b"), h100(), options(1, 8, 4096, 10, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->plans.empty());
  EXPECT_GT(r->rejected[static_cast<size_t>(Rejection::kOutOfMemory)], 0);
}

// Layers that do not divide over pp stages still interleave, as Megatron's
// account_for_embedding/loss_in_pipeline_split splits them: Llama 3.1 405B's 126 layers + the
// embedding + the loss = 128 slots; on PP 16 x VP 2, 4 per chunk: 3 + 30 x 4 + 3.
TEST(Search, InterleavesLayersThatDoNotDivideWithALayout) {
  SearchOptions o = options(512, 512, 4096, 200, 2);
  o.schedules = {Schedule::kInterleaved};
  o.simulate = false;
  Result<SearchResult> r = search(load("llama3.1-405b"), h100(), o);
  ASSERT_TRUE(r.ok()) << r.error();
  std::vector<int64_t> want(32, 4);
  want.front() = want.back() = 3;
  bool found = false;
  for (const RankedPlan& rp : r->plans) {
    EXPECT_EQ(rp.plan.pipeline_layout.empty(), 126 % rp.plan.pp == 0) << plan_to_json(rp.plan).dump();
    EXPECT_EQ(rp.plan.first_stage_layers + rp.plan.last_stage_layers, 0);
    if (rp.plan.pp == 16 && rp.plan.virtual_stages == 2) found = found || rp.plan.pipeline_layout == want;
  }
  EXPECT_TRUE(found);
}

TEST(Search, BadOptionsAreErrors) {
  const ModelSpec m = load("13b");
  EXPECT_EQ(search(m, h100(), options(0, 8, 4096, 10, 1)).error(), "--gpus must be >= 1, got 0");
  EXPECT_EQ(search(m, h100(), options(8, 8, 8192, 10, 1)).error(),
            "--seq-len 8192 exceeds max_position_embeddings 4096 of model '13b'");
}

}  // namespace
}  // namespace parallax
