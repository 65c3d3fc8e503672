#include "planner/simulation.h"

#include <cmath>
#include <map>
#include <regex>

#include <gtest/gtest.h>

#include "planner/export.h"
#include "planner/search.h"
#include "simulator/trace_compare.h"

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }

Plan korthikanti(int64_t pp, int64_t batch, Schedule s, int64_t v, bool selective) {
  Plan p;
  p.tp = 8;
  p.pp = pp;
  p.micro_batch = pp == 1 ? 4 : 1;
  p.global_batch = batch;
  p.seq_len = 2048;
  p.schedule = s;
  p.virtual_stages = v;
  p.recompute = selective ? Recompute::kSelective : Recompute::kFull;
  p.sequence_parallel = selective;
  p.execution.attention = AttentionKernel::kMaterialized;  // Megatron-LM 2022
  return p;
}

// Korthikanti et al. 2022 Table 5 on Selene (clusters/dgx-a100.json): iteration seconds with full
// recompute and with SP + selective recompute. Mean error must stay within 5% (Calculon: 3.65%),
// each run within 10%.
TEST(Accuracy, KorthikantiTable5) {
  struct Run { const char* model; int64_t pp, batch; Schedule s; int64_t v; double full_s, selective_s; };
  const Run runs[] = {{"gpt-22b", 1, 4, Schedule::k1F1B, 1, 1.42, 1.10},
                      {"gpt3-175b", 8, 64, Schedule::kInterleaved, 3, 18.13, 13.75},
                      {"gpt-530b", 35, 280, Schedule::kInterleaved, 3, 49.05, 37.83},
                      {"gpt-1t", 64, 512, Schedule::k1F1B, 1, 94.42, 71.49}};
  const ClusterSpec selene = load_cluster("dgx-a100").value();
  double sum = 0;
  int n = 0;
  for (const Run& r : runs) {
    const ModelSpec m = load(r.model);
    for (bool selective : {false, true}) {
      const Plan p = korthikanti(r.pp, r.batch, r.s, r.v, selective);
      ASSERT_TRUE(check_plan(p, m, 8).ok()) << r.model;
      Result<Simulation> sim = simulate_step(m, selene, p);
      ASSERT_TRUE(sim.ok()) << sim.error();
      const double measured = selective ? r.selective_s : r.full_s;
      const double err = std::abs(sim->report.step_time_s / measured - 1);
      EXPECT_LT(err, 0.10) << r.model << (selective ? " selective" : " full") << ": " << sim->report.step_time_s;
      sum += err;
      ++n;
    }
  }
  EXPECT_LT(sum / n, 0.05) << "mean error " << sum / n;
}

// Korthikanti et al. Table 4: one layer of the 22B model (TP 8, micro-batch 4) in ms, forward and
// backward, within 10%.
TEST(Accuracy, KorthikantiTable4PerLayer) {
  const ModelSpec m = load("gpt-22b");
  const ClusterSpec selene = load_cluster("dgx-a100").value();
  struct Row { const char* name; bool sp; Recompute rc; double fwd_ms, bwd_ms; };
  for (const Row& r : {Row{"baseline", false, Recompute::kNone, 7.7, 11.9}, Row{"SP", true, Recompute::kNone, 7.2, 11.8},
                       Row{"full", false, Recompute::kFull, 7.7, 19.5}, Row{"selective", false, Recompute::kSelective, 7.7, 13.2},
                       Row{"selective+SP", true, Recompute::kSelective, 7.2, 13.1}}) {
    Plan p = korthikanti(1, 4, Schedule::k1F1B, 1, false);
    p.sequence_parallel = r.sp;
    p.recompute = r.rc;
    const LayerTiming t = layer_timing(m, selene, p);
    EXPECT_NEAR(t.forward_s * 1e3, r.fwd_ms, 0.10 * r.fwd_ms) << r.name;
    EXPECT_NEAR((t.backward_input_s + t.backward_weight_s) * 1e3, r.bwd_ms, 0.10 * r.bwd_ms) << r.name;
  }
}

TEST(Simulation, DeterministicReport) {
  const ModelSpec m = load("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100").value();
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.dp = 2;
  p.zero = 1;
  p.global_batch = 64;
  p.seq_len = 4096;
  p.schedule = Schedule::kInterleaved;
  p.virtual_stages = 2;
  p.execution.overlap_grad_reduce = true;
  Result<Simulation> a = simulate_step(m, c, p), b = simulate_step(m, c, p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(evaluation_to_json(m, p, a->report).dump(), evaluation_to_json(m, p, b->report).dump());
  EXPECT_EQ(simulation_trace(*a, {}).dump(), simulation_trace(*b, {}).dump());
}

// The peak activations per stage come out of the schedule and agree with the closed forms.
TEST(Simulation, MemoryPeaksFollowTheSchedule) {
  const ModelSpec m = load("llama2-13b");
  const ClusterSpec c = load_cluster("dgx-h100").value();
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    Plan p;
    p.tp = 8;
    p.pp = 4;
    p.global_batch = 16;
    p.seq_len = 4096;
    p.schedule = s;
    p.virtual_stages = s == Schedule::kInterleaved ? 2 : 1;
    Result<Simulation> sim = simulate_step(m, c, p);
    ASSERT_TRUE(sim.ok());
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(sim->stages[i].peak_in_flight, in_flight_chunk_passes(s, 4, 16, p.virtual_stages, i));
      EXPECT_DOUBLE_EQ(sim->stages[i].memory.activations, stage_memory(m, p, i, 0).activations);
    }
  }
}

// Uneven stages: the last stage's logits make it the slowest, so the other stages idle more than
// the uniform bubble (p-1)/(m+p-1).
TEST(Simulation, UnevenStagesIdleBeyondTheClosedForm) {
  const ModelSpec m = load("gpt2");  // 50,257-word logits weigh as much as several of its layers
  Plan p;
  p.pp = 4;
  p.global_batch = 32;
  p.micro_batch = 4;
  p.seq_len = 1024;
  Result<Simulation> sim = simulate_step(m, load_cluster("dgx-h100").value(), p);
  ASSERT_TRUE(sim.ok());
  EXPECT_GT(sim->report.bubble_fraction, 3.0 / (8 + 3));
  EXPECT_GT(sim->stages[3].busy_s, sim->stages[1].busy_s);
  EXPECT_LT(sim->stages[3].bubble_s, sim->stages[1].bubble_s);
}

// GPT-2 (N = 124,439,808 parameters) at 1,024 tokens over `dp` ranks, two sequences each.
constexpr double kGpt2Params = 124439808;
Plan gpt2_data_parallel(int64_t dp) {
  Plan p;
  p.dp = dp;
  p.global_batch = 2 * dp;
  p.seq_len = 1024;
  return p;
}

// The lowered step moves what the estimate prices. GPT-2 (N = 124,439,808 parameters, one stage)
// at DP 4: ZeRO 0's bucketed all-reduce sends 1.5 x 4N with fp32 gradients, twice 1.5 x 2N; ZeRO 1
// adds only the reduce-scatter's 0.75 x 2N, since the all-gather still carries 2-byte weights.
TEST(Simulation, Fp32GradientsDoubleTheReduction) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = load_cluster("dgx-h100").value();
  const double n = kGpt2Params;
  const Plan p = gpt2_data_parallel(4);
  auto dp_bytes = [&](int zero, bool fp32_gradients) {
    Plan q = p;
    q.zero = zero;
    q.execution.fp32_gradients = fp32_gradients;
    return simulate_step(m, c, q).value().report.comm_bytes_per_gpu.dp;
  };
  EXPECT_NEAR(dp_bytes(0, false), 1.5 * 2 * n, 1e-6 * n);
  EXPECT_NEAR(dp_bytes(0, true), 1.5 * 4 * n, 1e-6 * n);
  EXPECT_NEAR(dp_bytes(1, true) - dp_bytes(1, false), 0.75 * 2 * n, 1e-6 * n);
}

// Hybrid sharding over two 8-GPU nodes (GPT-2, N = 124,439,808, DP 16, dp_shard 8, ZeRO 3, two
// micro-batches): the shard's gathers and reduce-scatters stay on NVLink, and each micro-batch's
// shard of the bf16 gradients (2N / 8 bytes) is all-reduced with the other node's replica,
// 2 x (2 - 1) / 2 x 2N / 8 = N / 4 bytes sent, N / 2 in the step: the only network bytes.
TEST(Simulation, HybridShardingSendsOnlyTheReplicaReduceOverTheNetwork) {
  const ModelSpec m = load("gpt2");
  const ClusterSpec c = load_cluster("dgx-h100").value();
  const double n = kGpt2Params;
  Plan p = gpt2_data_parallel(16);
  p.dp_shard = 8;
  p.zero = 3;
  ASSERT_EQ(p.micro_batches(), 2);
  const StepReport simulated = simulate_step(m, c, p).value().report;
  for (const StepReport& e : {estimate_step(m, c, p), simulated}) {
    EXPECT_NEAR(e.comm_bytes_per_gpu.dp_replica, n / 2, 1e-6 * n);
    EXPECT_NEAR(e.tier_bytes_per_gpu.network, n / 2, 1e-6 * n);
    EXPECT_NEAR(e.tier_bytes_per_gpu.nvlink, e.comm_bytes_per_gpu.dp - n / 2, 1e-6 * n);
  }
}

// The events of stage 0's track `tid` whose name starts with `prefix`: (start, end) in us.
std::vector<std::pair<double, double>> spans(const nlohmann::json& trace, int tid, const std::string& prefix) {
  std::vector<std::pair<double, double>> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 0 && e["tid"] == tid && e["name"].get<std::string>().rfind(prefix, 0) == 0)
      out.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  std::sort(out.begin(), out.end());
  return out;
}

// Llama-3-8B, TP 8 with SP over DP 4 nodes, ZeRO 1: 1.0 G weights per GPU gathered in bf16 (about
// 1.5 GB sent per GPU, some 30 ms over one NIC) against a forward of 1,024 tokens (a few ms).
Plan gathers_outlast_the_forward() {
  Plan p;
  p.tp = 8, p.dp = 4, p.zero = 1, p.sequence_parallel = true;
  p.global_batch = 8, p.seq_len = 1024;
  p.execution.overlap_grad_reduce = p.execution.overlap_param_gather = true;
  return p;
}

// With overlap_grad_reduce the DP buckets start beneath the last backward, each once its layers
// are done; the norms' TP all-reduce, which needs the whole backward, goes on the TP track and
// holds none of them back (Megatron reduces them after finish_grad_sync).
TEST(Simulation, OverlappedBucketsStartBeneathTheBackward) {
  const ModelSpec m = load("llama3-8b");
  Result<Simulation> sim = simulate_step(m, load_cluster("dgx-h100").value(), gathers_outlast_the_forward());
  ASSERT_TRUE(sim.ok());
  const nlohmann::json trace = simulation_trace(*sim, {});
  const auto backward = spans(trace, 0, "B mb=1"), buckets = spans(trace, 4, "reduce-scatter dp");
  ASSERT_EQ(backward.size(), 1u);
  ASSERT_GT(buckets.size(), 1u);
  EXPECT_LT(buckets.front().first, backward.front().second);
  EXPECT_EQ(spans(trace, 1, "allreduce tp norms").size(), 1u);
  EXPECT_TRUE(spans(trace, 4, "allreduce tp norms").empty());
}

// overlap_param_gather: the previous step's weight gathers run one bucket ahead of the first
// forward's layers, so its last bucket of layers (1/n of it, n buckets) starts only once the last
// gather is done: it ends 1/n of its duration after that gather, however fast the rest ran.
TEST(Simulation, WeightGathersPaceTheFirstForward) {
  const ModelSpec m = load("llama3-8b");
  const Plan p = gathers_outlast_the_forward();
  Result<Simulation> sim = simulate_step(m, load_cluster("dgx-h100").value(), p);
  ASSERT_TRUE(sim.ok());
  const nlohmann::json trace = simulation_trace(*sim, {});
  const auto gathers = spans(trace, 4, "all-gather dp"), forward = spans(trace, 0, "F mb=0"), second = spans(trace, 0, "F mb=1");
  ASSERT_GT(gathers.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  const double n = static_cast<double>(gathers.size()), last_gather_end = gathers.back().second;
  const double forward_us = second.front().second - second.front().first;  // an ungated forward
  EXPECT_GT(last_gather_end, forward.front().first + forward_us);          // the gathers outlast it
  EXPECT_NEAR(forward.back().second, last_gather_end + forward_us / n, 1e-3);
}

// Perfetto needs properly nested events per track; we emit none that overlap at all.
TEST(Trace, NoOverlapOnAnyTrackAndCanonicalNames) {
  const ModelSpec m = load("llama3-8b");
  Plan p;
  p.tp = 4;
  p.pp = 2;
  p.dp = 2;
  p.zero = 1;
  p.global_batch = 16;
  p.seq_len = 4096;
  p.sequence_parallel = true;
  p.execution.overlap_grad_reduce = true;
  Result<Simulation> sim = simulate_step(m, load_cluster("dgx-h100").value(), p);
  ASSERT_TRUE(sim.ok());
  const nlohmann::json trace = simulation_trace(*sim, {{"model", "llama3-8b"}});
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  const std::regex canonical(
      R"((tp )?(F|B|W) mb=\d+ chunk=\d+|(send|recv) pp (F|B) mb=\d+ chunk=\d+|(allreduce|reduce-scatter|all-gather) dp bucket=\d+|allreduce tp norms chunk=\d+|optimizer)");
  int complete = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_TRUE(std::regex_match(e["name"].get<std::string>(), canonical)) << e["name"];
    tracks[{e["pid"], e["tid"]}].push_back({e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
  }
  EXPECT_GT(complete, 100);
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-6) << "overlap on pid " << track.first << " tid " << track.second;
  }
}

// The planner prunes with the estimate before simulating; its top 10 must equal the top 10 of
// simulating every feasible candidate.
TEST(Search, PrunedRankingEqualsExhaustiveSimulation) {
  struct Case { const char* model; int64_t gpus, batch, seq; };
  for (const Case& k : {Case{"13b", 64, 1024, 4096}, Case{"llama3-8b", 16, 256, 8192}, Case{"mixtral-8x7b", 32, 256, 4096},
                        Case{"gpt3-175b", 128, 256, 2048}}) {
    const ModelSpec m = load(k.model);
    const ClusterSpec c = load_cluster("dgx-h100").value();
    SearchOptions o;
    o.gpus = k.gpus;
    o.global_batch = k.batch;
    o.seq_len = k.seq;
    o.top_k = 10;
    Result<SearchResult> pruned = search(m, c, o);
    o.simulate = false;
    o.top_k = 1'000'000;
    Result<SearchResult> all = search(m, c, o);
    ASSERT_TRUE(pruned.ok() && all.ok());
    std::vector<RankedPlan> exhaustive;
    for (const RankedPlan& r : all->plans) {
      Result<Simulation> sim = simulate_step(m, c, r.plan);
      ASSERT_TRUE(sim.ok());
      if (sim->report.fits_in_memory) exhaustive.push_back({r.plan, sim->report});
    }
    std::sort(exhaustive.begin(), exhaustive.end(), ranks_before);
    ASSERT_GE(exhaustive.size(), 10u) << k.model;
    ASSERT_EQ(pruned->plans.size(), 10u);
    for (size_t i = 0; i < 10; ++i)
      EXPECT_EQ(plan_to_json(pruned->plans[i].plan), plan_to_json(exhaustive[i].plan)) << k.model << " rank " << i + 1;
    EXPECT_LT(pruned->simulated, static_cast<int64_t>(all->plans.size())) << k.model;
  }
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// One definition of bubble fraction: `compare` reading a simulation's own trace finds the bubble
// the simulation reports.
TEST(Simulation, BubbleMatchesCompareOnItsTrace) {
  const ModelSpec m = load_model("llama3-8b").value();
  const ClusterSpec c = load_cluster("dgx-h100").value();
  for (Schedule s : {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    Plan p;
    p.tp = 2;
    p.pp = 4;
    p.dp = 2;
    p.zero = 1;
    p.global_batch = 32;
    p.seq_len = 4096;
    p.schedule = s;
    p.virtual_stages = s == Schedule::kInterleaved ? 2 : 1;
    Result<Simulation> sim = simulate_step(m, c, p);
    ASSERT_TRUE(sim.ok()) << sim.error();
    const nlohmann::json trace = simulation_trace(*sim, {});
    Result<Comparison> cmp = compare_traces(trace, trace);
    ASSERT_TRUE(cmp.ok()) << cmp.error();
    EXPECT_NEAR(cmp->predicted.bubble_fraction, sim->report.bubble_fraction, 1e-6) << schedule_name(s);
  }
}

}  // namespace
}  // namespace parallax
