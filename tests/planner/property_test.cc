// Properties of the cost model that must hold for any input, and extreme but legal inputs that
// must give finite results.
#include <cmath>

#include <gtest/gtest.h>

#include "planner/search.h"
#include "planner/simulation.h"

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }

std::vector<Plan> sample_plans() {
  std::vector<Plan> plans;
  for (int64_t tp : {1, 2, 8})
    for (int64_t pp : {1, 4})
      for (int64_t dp : {1, 4, 16})
        for (Schedule s : {Schedule::k1F1B, Schedule::kZbH1}) {
          Plan p;
          p.tp = tp;
          p.pp = pp;
          p.dp = dp;
          p.zero = dp > 1 ? 1 : 0;
          p.global_batch = 64 * dp;
          p.seq_len = 4096;
          p.schedule = s;
          p.execution.overlap_grad_reduce = dp == 16;
          plans.push_back(p);
        }
  return plans;
}

TEST(Properties, MoreBandwidthIsNeverSlower) {
  const ModelSpec m = load("llama3-8b");
  const ClusterSpec base = load_cluster("dgx-h100").value();
  ClusterSpec fast = base;
  fast.node.busbw_gbps *= 2;
  fast.network.bw_per_gpu_gbps *= 2;
  fast.gpu.hbm_gbps *= 2;
  for (const Plan& p : sample_plans()) {
    ASSERT_TRUE(check_plan(p, m, 8).ok());
    EXPECT_LE(estimate_step(m, fast, p).step_time_s, estimate_step(m, base, p).step_time_s);
    EXPECT_LE(simulate_step(m, fast, p)->report.step_time_s, simulate_step(m, base, p)->report.step_time_s * (1 + 1e-12))
        << plan_to_json(p).dump();
  }
}

TEST(Properties, MoreZeroShardingNeverNeedsMoreMemory) {
  const ModelSpec m = load("13b");
  const double reserved = 2.0 * 1073741824.0;
  for (int64_t dp : {2, 8, 64})
    for (bool offload : {false, true}) {
      double previous = INFINITY;
      for (int zero = offload ? 1 : 0; zero <= 3; ++zero) {
        Plan p;
        p.dp = dp;
        p.zero = zero;
        p.offload = offload;
        p.global_batch = dp;
        p.seq_len = 4096;
        const double peak = peak_memory(m, p, reserved).total();
        EXPECT_LE(peak, previous) << "dp " << dp << " zero " << zero;
        previous = peak;
      }
    }
}

TEST(Properties, StepTimeIsDeterministic) {
  const ModelSpec m = load("mixtral-8x7b");
  const ClusterSpec c = load_cluster("hgx-h200").value();
  for (const Plan& p : sample_plans()) {
    EXPECT_EQ(estimate_step(m, c, p).step_time_s, estimate_step(m, c, p).step_time_s);
    EXPECT_EQ(simulate_step(m, c, p)->report.step_time_s, simulate_step(m, c, p)->report.step_time_s);
  }
}

// 1,000 layers, a million-word vocabulary, a million GPUs: legal, so finite answers.
TEST(Extremes, HugeButLegalInputsGiveFiniteResults) {
  ModelSpec m = model_from_hf_config(nlohmann::json::parse(R"({"model_type":"llama","hidden_size":4096,
      "intermediate_size":11008,"num_hidden_layers":1000,"num_attention_heads":32,"num_key_value_heads":8,
      "vocab_size":1000000,"max_position_embeddings":4096})"), "huge").value();
  const ClusterSpec c = load_cluster("dgx-h100").value();
  Plan p;
  p.tp = 8;
  p.pp = 100;
  p.dp = 1250;  // 1,000,000 GPUs
  p.zero = 1;
  p.global_batch = 1250 * 8;
  p.seq_len = 4096;
  ASSERT_TRUE(check_plan(p, m, 8).ok());
  const StepReport e = estimate_step(m, c, p);
  for (double x : {e.step_time_s, e.mfu, e.peak_memory_bytes, e.comm_bytes_per_gpu.dp, e.tokens_per_s})
    EXPECT_TRUE(std::isfinite(x) && x > 0);
  Result<Simulation> sim = simulate_step(m, c, p);
  ASSERT_TRUE(sim.ok());
  EXPECT_TRUE(std::isfinite(sim->report.step_time_s));
  SearchOptions o;
  o.gpus = 1000000;
  o.global_batch = 1 << 20;
  o.seq_len = 4096;
  o.top_k = 3;
  Result<SearchResult> r = search(m, c, o);
  ASSERT_TRUE(r.ok());
  for (const RankedPlan& rp : r->plans) EXPECT_TRUE(std::isfinite(rp.report.step_time_s));
}

}  // namespace
}  // namespace parallax
