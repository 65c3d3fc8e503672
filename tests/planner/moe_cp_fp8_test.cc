// Expert parallelism, context parallelism and FP8 through every unit that prices them: the rank
// layout, legality, GEMM shapes, exchanges, memory, the step program, the search and the exports.
// Expected values are derived by hand in the comments.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "planner/export.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "planner/simulation.h"
#include "program/framework.h"
#include "program/model_state.h"
#include "program/runtime_support.h"
#include "simulator/collective_cost.h"
#include "simulator/compute_cost.h"
#include "simulator/step_costs.h"
#include "small_plans.h"

namespace parallax {
namespace {

using testing_support::load;
using testing_support::plan;
using testing_support::round_cluster;

// TP 2 x CP 2 x DP 2 x PP 2 with EP 2: rank r sits at tp = r % 2, data index e = (r / 2) % 4
// (cp = e % 2, dp = e / 2), pp = r / 8. Rank 7: tp 1, e 3 -> cp 1, dp 1, pp 0.
TEST(RankGrid, ContextAndExpertGroups) {
  const RankGrid g(2, 2, 2, 0, 2, 2);
  EXPECT_EQ(g.size(), 16);
  EXPECT_EQ(g.coords(7), (RankCoords{1, 1, 0, 1}));
  for (int r = 0; r < 16; ++r) EXPECT_EQ(g.rank(g.coords(r)), r);
  auto same = [&](GroupKind k, int a, int b) { return g.group(k, a).color == g.group(k, b).color; };
  // CP: the ranks of one sequence, e in {2, 3} at tp 1: ranks 5 and 7, t apart.
  EXPECT_TRUE(same(GroupKind::kCp, 5, 7));
  EXPECT_FALSE(same(GroupKind::kCp, 3, 7));
  EXPECT_EQ(g.group(GroupKind::kCp, 7).key, 1);
  EXPECT_EQ(g.stride(GroupKind::kCp), 2);
  // Dense gradients reduce over all c x d = 4 data ranks: 1, 3, 5, 7.
  EXPECT_EQ(g.group_size(GroupKind::kDp), 4);
  EXPECT_TRUE(same(GroupKind::kDp, 1, 7));
  // EP: consecutive data indices {0, 1} and {2, 3}; the experts' DP joins e 1 and e 3 (ep apart).
  EXPECT_TRUE(same(GroupKind::kEp, 5, 7));
  EXPECT_FALSE(same(GroupKind::kEp, 3, 5));
  EXPECT_TRUE(same(GroupKind::kExpertDp, 3, 7));
  EXPECT_FALSE(same(GroupKind::kExpertDp, 5, 7));
  EXPECT_EQ(g.stride(GroupKind::kExpertDp), 4);
  EXPECT_EQ(g.group_size(GroupKind::kExpertDp), 2);
  // Pipeline peers are t c d = 8 apart.
  EXPECT_TRUE(same(GroupKind::kPp, 7, 15));
}

// Expert TP 1 under TP 2 (DP 2, EP 4): an expert layer numbers the stage's ranks q = e t + tp =
// (edp ep + ep) etp + etp, so all four ranks form one EP group (stride 1) and each holds its own
// experts (expert DP 1).
TEST(RankGrid, ExpertTensorParallelBelowTp) {
  const RankGrid g(2, 2, 1, 0, 1, 4, 1);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(g.group(GroupKind::kEp, r).color, g.group(GroupKind::kEp, 0).color);
    EXPECT_EQ(g.group(GroupKind::kEp, r).key, r);
  }
  EXPECT_EQ(g.stride(GroupKind::kEp), 1);
  EXPECT_EQ(g.group_size(GroupKind::kExpertDp), 1);
  // Mixtral, s 4096, TP 2, EP 4, expert TP 1: each rank dispatches its half of the 4096 tokens x 2
  // copies = 4096 rows to its 2 experts, 2048 each, whole (not TP-split).
  const ModelSpec m = load("mixtral-8x7b");
  for (const Gemm& gemm : layer_gemms(m, GemmShape{4096, 1, 2, 1, 4, 1.0, 1}))
    if (std::string(gemm.name) == "fc1") {
      EXPECT_EQ(gemm.m, 2048);
      EXPECT_EQ(gemm.n, 2 * 14336);
    }
  Plan p = plan(2, 1, 2, 4, 4096);
  p.etp = 1, p.sequence_parallel = true;
  EXPECT_EQ(check_plan(p, m, 8).error(), "");
  EXPECT_DOUBLE_EQ(stage_param_split(m, p, 0).expert, 32.0 * 8 * 3 * 4096 * 14336 / 4);
  EXPECT_NE(megatron_arguments(m, p).value().find("--expert-tensor-parallel-size 1"), std::string::npos);
  EXPECT_FALSE(check_runtime_support(m, p).ok());
  p.etp = 3;  // does not divide tp 2
  EXPECT_STREQ(violation_key(first_violation(p, m, 8)), "ep_does_not_divide_cp_dp");
}

TEST(Plan, ContextAndExpertLegality) {
  const ModelSpec llama = load("llama3.1-8b"), mixtral = load("mixtral-8x7b");
  auto why = [](const Plan& p, const ModelSpec& m) { return violation_key(first_violation(p, m, 8)); };
  EXPECT_STREQ(why(plan(1, 4, 1, 1, 4100), llama), "cp_needs_seq_len_multiple_of_2cp");  // 4100 % 8 != 0
  Plan a2a = plan(2, 8, 1, 1, 8192);
  a2a.execution.cp_comm = CpComm::kAllToAll;  // 8 KV heads over tp x cp = 16
  EXPECT_STREQ(why(a2a, llama), "cp_a2a_needs_heads_multiple_of_tp_cp");
  Plan materialized = plan(1, 2, 1, 1, 8192);
  materialized.execution.attention = AttentionKernel::kMaterialized;
  EXPECT_STREQ(why(materialized, llama), "cp_needs_flash_attention");
  EXPECT_STREQ(why(plan(1, 1, 2, 2, 4096), llama), "ep_does_not_divide_experts");    // dense
  EXPECT_STREQ(why(plan(1, 1, 16, 16, 4096), mixtral), "ep_does_not_divide_experts");  // 8 experts
  EXPECT_STREQ(why(plan(1, 1, 4, 8, 4096), mixtral), "ep_does_not_divide_cp_dp");
  EXPECT_STREQ(why(plan(1, 2, 4, 8, 4096), mixtral), "none");  // EP 8 over cp x dp = 8
  Plan z2 = plan(1, 1, 4, 2, 4096);
  z2.zero = 2;
  EXPECT_STREQ(why(z2, mixtral), "none");  // ZeRO-2/3 shard the experts over their own ranks
  z2.dp_shard = 2;
  EXPECT_STREQ(why(z2, mixtral), "ep_with_dp_shard");
  EXPECT_EQ(plan(2, 4, 3, 1, 8).gpus(), 24);
  // The keys round-trip through JSON.
  Plan j = plan(2, 4, 2, 2, 8192);
  j.precision = Precision::kFp8;
  j.execution.cp_comm = CpComm::kAllToAll;
  j.execution.moe_imbalance = 1.5;
  j.execution.fp8_recipe = Fp8Recipe::kCurrent;
  const Plan back = plan_from_json(plan_to_json(j), "j").value();
  EXPECT_EQ(back.cp, 4);
  EXPECT_EQ(back.ep, 2);
  EXPECT_EQ(back.precision, Precision::kFp8);
  EXPECT_EQ(back.execution.cp_comm, CpComm::kAllToAll);
  EXPECT_EQ(back.execution.moe_imbalance, 1.5);
  EXPECT_EQ(back.execution.fp8_recipe, Fp8Recipe::kCurrent);
}

// All-to-all on the round cluster (NVLink 100 GB/s and 1 us; NICs 10 GB/s per GPU and 10 us):
//  - 4 ranks in a node, 400 MB each: 100 MB to each of 3 peers over NVLink = 1 us + 3 ms.
//  - 16 ranks over 2 nodes (8 per node), 1.6 GB each: 8 x 100 MB leave through the GPU's NIC
//    (the tier's 80 GB/s over 8 ranks = 10 GB/s) = 80 ms, beside 7 x 100 MB over NVLink (7 ms):
//    10 us + 80 ms.
TEST(Collectives, AllToAllSendsEachPeerItsShare) {
  const ClusterSpec c = round_cluster();
  EXPECT_NEAR(collective_time_s(Collective::kAllToAll, 400e6, 4, group_link(c, place_group(4, 1, 8))), 1e-6 + 3e-3, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllToAll, 1.6e9, 16, group_link(c, place_group(16, 1, 8))), 10e-6 + 0.08, 1e-12);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kAllToAll, 400e6, 4), 300e6);
}

// Mixtral (8 experts, top-2) with s 4096, b 1, EP 4: each rank holds 2 experts and receives its
// 4096 tokens x 2 copies = 8192 rows, 4096 per expert. With the busiest expert at 2x the mean the
// experts' spread is σ = (2 − 1) / z_8 = 1 / 1.4236003 and the busiest of 4 ranks of 2 experts
// holds 1 + z_4 σ / √2 = 1 + 1.0293754 / (1.4236003 × 1.4142136) = 1.5112943x the mean
// (6190 rows per expert, rounded). A capacity factor of 1.25 caps the busiest expert:
// 1 + 0.25 × 0.5112943 = 1.1278236x (4620 rows). With an expert per rank (EP 8) the busiest rank
// is the busiest expert; without EP no rank is busier than another.
TEST(LayerCost, ExpertGemmsFollowEpAndTheBusiestExpert) {
  const ModelSpec m = load("mixtral-8x7b");
  auto fc1 = [&](double load) {
    for (const Gemm& g : layer_gemms(m, GemmShape{4096, 1, 1, 1, 4, load}))
      if (std::string(g.name) == "fc1") return g;
    return Gemm{"none", 0, 0, 0};
  };
  EXPECT_EQ(fc1(1.0).m, 4096);
  EXPECT_EQ(fc1(1.0).batch, 2);
  EXPECT_EQ(fc1(1.0).n, 2 * 14336);
  EXPECT_EQ(fc1(1.0).m_sd, 0.0);  // padded, or priced so
  // Ragged rows: a count of 4096 random choices spreads by √4096 = 64; with the routing's spread
  // of half the mean, √(4096 + 2048²) = 2048.9998.
  GemmShape ragged{4096, 1, 1, 1, 4, 1.0, 0, true, 0.0};
  for (const Gemm& g : layer_gemms(m, ragged)) {
    if (std::string(g.name) == "fc1") {
      EXPECT_DOUBLE_EQ(g.m_sd, 64.0);
    }
  }
  ragged.expert_spread = 0.5;
  for (const Gemm& g : layer_gemms(m, ragged)) {
    if (std::string(g.name) == "fc1") {
      EXPECT_NEAR(g.m_sd, 2048.9998, 1e-4);
    }
  }
  Plan p = plan(1, 1, 4, 4, 4096);
  p.execution.moe_imbalance = 2.0;
  EXPECT_NEAR(expert_load(m, p), 1.5112943, 1e-6);
  EXPECT_EQ(fc1(expert_load(m, p)).m, 6190);
  p.execution.moe_capacity_factor = 1.25;
  EXPECT_NEAR(expert_load(m, p), 1.1278236, 1e-6);
  EXPECT_EQ(fc1(expert_load(m, p)).m, 4620);
  p.execution.moe_capacity_factor = 0;
  p.ep = 8;
  EXPECT_DOUBLE_EQ(expert_load(m, p), 2.0);
  p.ep = 1;
  EXPECT_DOUBLE_EQ(expert_load(m, p), 1.0);
}

// The default busiest expert, a trained router's on real text: 1 + √π Gini z_E. Mixtral (GQA, 8
// experts): 1 + 1.7724539 × 0.105 × 1.4236003 = 1.264943; with 128 experts (Qwen3-235B):
// 1 + 0.1861077 × 2.5945974 = 1.482874; DeepSeek-V2-Lite (MLA, 64 experts, z 2.3437335):
// 1 + 1.7724539 × 0.24 × 2.3437335 = 1.996998. An input beyond E/k (every token chose the expert)
// is capped there: Mixtral's 4.
TEST(LayerCost, DefaultRoutingImbalance) {
  ModelSpec m = load("mixtral-8x7b");
  Plan p = plan(1, 1, 8, 8, 4096);
  EXPECT_NEAR(busiest_expert(m, p), 1.264943, 1e-6);
  EXPECT_NEAR(expert_load(m, p), busiest_expert(m, p), 1e-12);  // an expert per rank
  EXPECT_NEAR(busiest_expert(load("deepseek-v2-lite"), p), 1.996998, 1e-6);
  p.execution.moe_imbalance = 10;
  EXPECT_DOUBLE_EQ(busiest_expert(m, p), 4.0);
  m.experts = 128, m.experts_per_token = 8;
  p.execution.moe_imbalance = 0;
  EXPECT_NEAR(busiest_expert(m, p), 1.482874, 1e-6);
}

// The expected maximum of n standard normals: 1/√π for two; tabulated (Harter 1961) 1.029375 for
// 4, 1.423600 for 8, 1.765991 for 16; 0 for one.
TEST(LayerCost, ExpectedMaximumOfNormals) {
  EXPECT_EQ(expected_max_of_normals(1), 0.0);
  EXPECT_NEAR(expected_max_of_normals(2), 1 / std::sqrt(3.141592653589793), 1e-12);
  EXPECT_NEAR(expected_max_of_normals(4), 1.029375, 1e-6);
  EXPECT_NEAR(expected_max_of_normals(8), 1.423600, 1e-6);
  EXPECT_NEAR(expected_max_of_normals(16), 1.765991, 1e-6);
}

// MLA (DeepSeek-V2-Lite: 16 heads, Q/K head 128 + 64 = 192, V head 128): QK^T 2 s 16 x 192 and
// AV 2 s 16 x 128 per token = 10,240 s.
TEST(LayerCost, LatentAttentionCore) {
  const ModelSpec m = load("deepseek-v2-lite");
  EXPECT_DOUBLE_EQ(attention_core_flops_per_token(m, 4096), 10240.0 * 4096);
  EXPECT_EQ(m.dense_layers, 1);
  EXPECT_EQ(dense_layer_model(m).ffn_hidden, 10944);
  EXPECT_FALSE(dense_layer_model(m).is_moe());
}

// CP keeps s / cp tokens per rank: a quarter of every activation at cp 4. FP8 saves the QKV, O,
// FC1 and FC2 inputs at 1 byte: Llama-3-8B (h 4096, o 4096, f 14336), flash, per token:
//   attention 2h + (2q + 2kv + 2v + 2o + 4a) = 8192 + 20608 = 28800 -> 28800 - h - o = 20608;
//   MLP 2h + 6f = 94208 -> 94208 - h - f = 75776.
TEST(Activations, ContextParallelAndFp8) {
  const ModelSpec m = load("llama3-8b");
  ActivationOptions o{8192, 1, 1, false, Recompute::kNone, AttentionKernel::kFlash};
  const double one = layer_activation_bytes(m, o).total();
  o.cp = 4;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, o).total(), one / 4);
  o.cp = 1;
  o.fp8 = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, o).attention, 8192.0 * 20608);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, o).mlp, 8192.0 * 75776);
}

// EP token all-to-alls: Mixtral, s 4096, b 1, TP 1, EP 4 inside a node. Each rank's routed copies,
// 4096 x 2 x 4096 x 2 bytes = 67,108,864, go out in 4 all-to-alls a layer (dispatch and combine,
// forward and backward), each sending 3/4 of them: 4 x 50,331,648 = 201,326,592 bytes.
// With the busiest expert at 2x the mean the busiest rank receives and returns 1.5112943x the mean
// (ExpertGemmsFollowEpAndTheBusiestExpert), and each all-to-all lasts until it has: the bytes
// counted stay the mean's.
TEST(StepCosts, ExpertAllToAllBytes) {
  const ModelSpec m = load("mixtral-8x7b");
  Plan p = plan(1, 1, 4, 4, 4096);
  p.execution.moe_imbalance = 1;
  const LayerTiming t = layer_timing(m, round_cluster(), p);
  EXPECT_DOUBLE_EQ(t.ep_bytes, 201326592.0);
  // Each all-to-all: 1 us + 3 x 16,777,216 B / 100 GB/s; two forward.
  EXPECT_NEAR(t.exchange_forward_s, 2 * (1e-6 + 3 * 16777216.0 / 100e9), 1e-12);
  p.execution.moe_imbalance = 2;
  const LayerTiming skewed = layer_timing(m, round_cluster(), p);
  EXPECT_DOUBLE_EQ(skewed.ep_bytes, 201326592.0);
  EXPECT_NEAR(skewed.exchange_forward_s, 2 * (1e-6 + 1.5112943 * 3 * 16777216.0 / 100e9), 1e-9);
}

// DeepEP sends a token once to each other node holding one of its experts. Mixtral (8 experts,
// top 2) over 2 nodes of 4 experts: P0 = (4/8)(3/7) = 3/14, so 1 x (1 - 3/14) = 11/14 remote
// copies instead of 2 x 1/2 = 1. Qwen3-235B (128, top 8) over 4 nodes: P0 = prod_{i<8} (96 - i) /
// (128 - i) = 0.092747, 3 x 0.907253 = 2.72176 instead of 8 x 3/4 = 6. DeepSeek-V3 on 8 nodes, its
// 8 expert groups the nodes: 4 of them chosen, 4 x 7/8 = 3.5.
TEST(StepCosts, DeepEpSendsATokenOncePerRemoteNode) {
  const ModelSpec mixtral = load("mixtral-8x7b");
  EXPECT_NEAR(remote_nodes_per_token(mixtral, 2), 11.0 / 14.0, 1e-12);
  EXPECT_EQ(remote_nodes_per_token(mixtral, 1), 0);
  ModelSpec qwen = mixtral;
  qwen.experts = 128, qwen.experts_per_token = 8;
  EXPECT_NEAR(remote_nodes_per_token(qwen, 4), 2.7217581933, 1e-9);
  EXPECT_NEAR(remote_nodes_per_token(load("deepseek-v3"), 8), 3.5, 1e-12);
  // Mixtral on EP 16 over the two nodes, s 4096: the routed copies 4096 x 2 x 4096 x 2 B; DeepEP's
  // all-to-all takes the longer of 11/14 of a token's bytes per token over the NIC and 7/8 of the
  // copies forwarded over NVLink.
  Plan p = plan(1, 1, 16, 16, 4096);
  p.execution.moe_imbalance = 1;
  const ClusterSpec c = round_cluster();
  const LinkTier link = group_link(c, p, GroupKind::kEp);
  ASSERT_TRUE(link.crosses_nodes);
  const double per_gpu_nic = link.busbw_Bps / static_cast<double>(link.ranks_per_node), routed = 4096.0 * 2 * 4096 * 2;
  const double alltoall = layer_timing(mixtral, c, p).exchange_forward_s;
  p.execution.moe_dispatcher = MoeDispatcher::kDeepEp;
  const double deepep = link.latency_s + std::max(4096.0 * 11 / 14 * 4096 * 2 / per_gpu_nic, routed * 7 / 8 / link.intra_busbw_Bps);
  EXPECT_NEAR(layer_timing(mixtral, c, p).exchange_forward_s, 2 * deepep, 1e-12);
  EXPECT_LT(2 * deepep, alltoall);
}

// Megatron's 1F1B A2A overlap (execution.moe_a2a_overlap). A layer of F 10, B 20 + W 5, with EP
// all-to-alls of 3 (forward) and 4 (backward): beside a backward a forward hides min(3, 25 - 4) = 3,
// 10 -> 7; beside a forward a backward hides min(4, 10 - 3) = 4, 20 -> 16. Where the opposite
// pass's other work is shorter, it hides only that long: F 2 (all-to-alls 1.5) and B 3 (2.5) hide
// min(1.5, 3 - 2.5) = 0.5 -> 1.5 and min(2.5, 2 - 1.5) = 0.5 -> 2.5. With ep_overlap_exposed 1/4,
// 3/4 of what hides does: 10 - 2.25 = 7.75 and 20 - 3 = 17.
TEST(StepCosts, AllToAllOverlapHidesBehindTheOppositePass) {
  LayerTiming t;
  t.forward_s = 10, t.backward_input_s = 20, t.backward_weight_s = 5, t.ep_forward_s = 3, t.ep_backward_s = 4;
  LayerTiming o = exchange_overlapped(t, false, 0);
  EXPECT_DOUBLE_EQ(o.forward_s, 7);
  EXPECT_DOUBLE_EQ(o.backward_input_s, 16);
  EXPECT_DOUBLE_EQ(o.backward_weight_s, 5);
  EXPECT_DOUBLE_EQ(exchange_overlapped(t, true, 0).forward_s, 7);  // ZB-H1: B without W, 20 - 4 still covers 3
  EXPECT_DOUBLE_EQ(exchange_overlapped(t, false, 0.25).forward_s, 7.75);
  EXPECT_DOUBLE_EQ(exchange_overlapped(t, false, 0.25).backward_input_s, 17);
  EXPECT_DOUBLE_EQ(exchange_overlapped(t, false, 1).forward_s, 10);
  t.forward_s = 2, t.backward_input_s = 3, t.backward_weight_s = 0, t.ep_forward_s = 1.5, t.ep_backward_s = 2.5;
  o = exchange_overlapped(t, false, 0);
  EXPECT_DOUBLE_EQ(o.forward_s, 1.5);
  EXPECT_DOUBLE_EQ(o.backward_input_s, 2.5);
  // A layer's EP part of its exchange, which the overlap hides: 2 all-to-alls per pass.
  const ModelSpec mixtral = load("mixtral-8x7b");
  const LayerTiming lt = layer_timing(mixtral, round_cluster(), plan(1, 1, 2, 2, 4096));
  EXPECT_GT(lt.ep_forward_s, 0);
  EXPECT_DOUBLE_EQ(lt.ep_forward_s, lt.exchange_forward_s);  // no CP
  EXPECT_DOUBLE_EQ(lt.ep_backward_s, lt.exchange_backward_s);
}

// The pairs Megatron's combined 1F1B runs. PP 1, 3 micro-batches: F0 B0 F1 B1 F2 B2, and a backward
// never runs beside its own forward, so B0 + F1 and B1 + F2 pair while F0 and B2 run alone. Stage 0
// of PP 2 with 4: F0 F1 B0 F2 B1 F3 B2 B3 pairs F1 + B0, F2 + B1, F3 + B2. Over the step the paired
// passes are shorter by what they hide: with PP 1, 2 forwards and 2 backwards of 32 layers each.
TEST(StepProgram, AllToAllOverlapPairsNeighbouringPassesOfOtherMicroBatches) {
  const ModelSpec m = load("mixtral-8x7b");
  Plan p = plan(1, 1, 2, 2, 4096);
  p.global_batch = 6;
  p.execution.moe_a2a_overlap = true;
  auto passes = [&](const Plan& q) {
    std::string s;
    const StepProgram prog = build_step_program(m, q);
    for (const ProgramOp& op : prog.stages[0].ops)
      if (op.type == ProgramOpType::kCompute) {
        s += op.pass == OpKind::kForward ? 'F' : 'B';
        s += std::to_string(op.micro_batch);
        s += op.exchange_overlapped ? "* " : " ";
      }
    return s;
  };
  EXPECT_EQ(passes(p), "F0 B0* F1* B1* F2* B2 ");
  Plan pp = p;
  pp.pp = 2, pp.global_batch = 8;
  EXPECT_EQ(passes(pp), "F0 F1* B0* F2* B1* F3* B2* B3 ");
  Plan dense = p;
  dense.ep = 1;  // no all-to-alls to hide
  EXPECT_EQ(passes(dense), "F0 B0 F1 B1 F2 B2 ");
  Plan off = p;
  off.execution.moe_a2a_overlap = false;
  EXPECT_EQ(passes(off), "F0 B0 F1 B1 F2 B2 ");

  // The round cluster has no calibration: ep_overlap_exposed 1 would hide nothing, so take 0.
  ClusterSpec c = round_cluster();
  c.calibration.ep_overlap_exposed = 0;
  const LayerTiming lt = layer_timing(m, c, p), hidden = exchange_overlapped(lt, false, 0);
  const double saved = 2 * 32 * ((lt.forward_s - hidden.forward_s) + (lt.backward_input_s - hidden.backward_input_s));
  ASSERT_GT(saved, 0);
  const double with = simulate_step(m, c, p).value().report.step_time_s, without = simulate_step(m, c, off).value().report.step_time_s;
  EXPECT_NEAR(without - with, saved, 1e-9 * without);
  EXPECT_NEAR(simulate_report(m, c, p).value().report.step_time_s, with, 1e-9 * with);
  EXPECT_TRUE(plan_from_json(plan_to_json(p), "j").value().execution.moe_a2a_overlap);
  // As Megatron-Core runs it: --overlap-moe-expert-parallel-comm, interleaved when PP > 1, no full
  // recompute; other frameworks and the runtimes do not overlap.
  p.sequence_parallel = false;
  EXPECT_NE(megatron_arguments(m, p).value().find("--overlap-moe-expert-parallel-comm"), std::string::npos);
  EXPECT_EQ(megatron_arguments(m, off).value().find("--overlap-moe-expert-parallel-comm"), std::string::npos);
  EXPECT_NE(megatron_arguments(m, pp).error().find("interleaved"), std::string::npos);
  EXPECT_EQ(framework_refusal("megatron", pp, m), "megatron's expert all-to-all overlap needs the interleaved schedule when pp > 1");
  Plan full = p;
  full.recompute = Recompute::kFull;
  EXPECT_NE(framework_refusal("megatron", full, m).find("without full recompute"), std::string::npos);
  EXPECT_EQ(framework_refusal("megatron", p, m), "");
  EXPECT_NE(framework_refusal("torchtitan", p, m).find("does not overlap"), std::string::npos);
  EXPECT_NE(check_runtime_support(m, p).error().find("moe_a2a_overlap"), std::string::npos);
}

// CP's ring: Llama-3-8B, s 2048, b 1, TP 8, CP 2 — the CP pair is 8 ranks apart, in two nodes, so
// each step crosses the network: 10 us + K and V of 1024 tokens, 1024 x 2048 x 2 / 8 =
// 524,288 B, at one NIC's 10 GB/s = 62.43 us. The forward attention is 4 x 2048 x 4096 per token
// x 1024 tokens / 8, halved by the causal mask = 2.147e9 FLOP at 50 TFLOP/s = 42.95 us, of which
// one step hides a half (cp 2): exposed 62.43 - 21.47 = 40.95 us.
TEST(StepCosts, ContextParallelRingExposesWhatAttentionCannotHide) {
  const ModelSpec m = load("llama3-8b");
  Plan p = plan(8, 2, 1, 1, 2048);
  p.sequence_parallel = true;
  const LayerTiming t = layer_timing(m, round_cluster(), p);
  const double step = 10e-6 + 524288.0 / 10e9;
  const double core = 4.0 * 2048 * 4096 * 1024 / 8 * 0.5 / 50e12;
  EXPECT_NEAR(t.exchange_forward_s, step - core / 2, 1e-12);
  // Sent: the forward's step (K, V) and the backward's (with dK, dV): 3 x 524,288.
  EXPECT_DOUBLE_EQ(t.cp_bytes, 3 * 524288.0);
}

// The all-gather variant on the same plan: K and V of both ranks, 2 x 524,288 = 1,048,576 B,
// all-gathered over 2 ranks in two nodes: 10 us + 524,288 B / 10 GB/s = 62.43 us forward (the
// gradients' reduce-scatter the same backward), unhidden; each rank sends its half each way.
TEST(StepCosts, ContextParallelAllGather) {
  const ModelSpec m = load("llama3-8b");
  Plan p = plan(8, 2, 1, 1, 2048);
  p.sequence_parallel = true;
  p.execution.cp_comm = CpComm::kAllGather;
  const LayerTiming t = layer_timing(m, round_cluster(), p);
  EXPECT_NEAR(t.exchange_forward_s, 10e-6 + 524288.0 / 10e9, 1e-12);
  EXPECT_NEAR(t.exchange_backward_s, 10e-6 + 524288.0 / 10e9, 1e-12);
  EXPECT_DOUBLE_EQ(t.cp_bytes, 2 * 524288.0);
}

// Mixtral, DP 4, EP 2, ZeRO-1: each rank holds 4 of the 8 experts; their gradients reduce over the
// 2 ranks holding the same experts, beside the dense buckets over all 4.
TEST(StepProgram, ExpertGradientsReduceOverTheirOwnRanks) {
  const ModelSpec m = load("mixtral-8x7b");
  Plan p = plan(1, 1, 4, 2, 4096);
  p.zero = 1;
  p.global_batch = 4;
  const StageParams split = stage_param_split(m, p, 0);
  EXPECT_DOUBLE_EQ(split.expert, 32.0 * 8 * 3 * 4096 * 14336 / 2);
  const StepProgram prog = build_step_program(m, p);
  int expert_reductions = 0, expert_gathers = 0;
  for (const ProgramOp& op : prog.stages[0].ops) {
    if (op.role == CollectiveRole::kExpertGradients) {
      ++expert_reductions;
      EXPECT_EQ(op.group, GroupKind::kExpertDp);
      EXPECT_DOUBLE_EQ(op.bytes, split.expert * 2);
      EXPECT_EQ(op_name(op), "reduce-scatter expert-dp chunk=0");
    }
    if (op.role == CollectiveRole::kExpertWeights) ++expert_gathers;
  }
  EXPECT_EQ(expert_reductions, 1);
  EXPECT_EQ(expert_gathers, 1);
  // ZeRO-1 shards the experts' optimizer states over their 2 ranks, the rest over 4.
  const MemoryBreakdown mem = stage_memory(m, p, 0, 0);
  EXPECT_DOUBLE_EQ(mem.optimizer, 12 * (split.dense / 4 + split.expert / 2));
}

// The issue's acceptance: Mixtral-8x7B and DeepSeek-V2-Lite rank plans with EP (routed with forced
// balance, as the published MoE benchmarks are), a 131,072-token Llama-3.1-8B plan with CP fits
// and ranks, and FP8 plans price the FP8 peak.
TEST(Search, RanksExpertAndContextParallelPlans) {
  const ClusterSpec c = load_cluster("dgx-h100").value();
  SearchOptions o;
  o.top_k = 3;
  o.threads = 2;
  o.gpus = 64, o.seq_len = 4096, o.global_batch = 512;
  o.execution.moe_imbalance = 1;
  const SearchResult mixtral = search(load("mixtral-8x7b"), c, o).value();
  ASSERT_FALSE(mixtral.plans.empty());
  EXPECT_GT(mixtral.plans[0].plan.ep, 1);
  o.gpus = 16;
  // DeepSeek-V2-Lite on two nodes: ZeRO-3 over DP 16 hides its gathers beneath the passes and
  // edges out EP (by 3%); EP plans rank among the next few.
  o.top_k = 5;
  const SearchResult lite = search(load("deepseek-v2-lite"), c, o).value();
  o.top_k = 3;
  ASSERT_EQ(lite.plans.size(), 5u);
  EXPECT_TRUE(std::any_of(lite.plans.begin(), lite.plans.end(), [](const RankedPlan& r) { return r.plan.ep > 1; }));
  // A trained router's default imbalance costs the EP plans: Mixtral's best is slower.
  o.gpus = 64;
  o.execution.moe_imbalance = 0;
  EXPECT_GT(search(load("mixtral-8x7b"), c, o).value().plans[0].report.step_time_s, mixtral.plans[0].report.step_time_s);
  o.gpus = 64, o.seq_len = 131072, o.global_batch = 32;
  const SearchResult longctx = search(load("llama3.1-8b"), c, o).value();
  ASSERT_FALSE(longctx.plans.empty());
  EXPECT_GT(longctx.plans[0].plan.cp, 1);
  EXPECT_TRUE(longctx.plans[0].report.fits_in_memory);
  o.precision = Precision::kFp8;
  const SearchResult fp8 = search(load("llama3.1-8b"), c, o).value();
  ASSERT_FALSE(fp8.plans.empty());
  EXPECT_LT(fp8.plans[0].report.step_time_s, longctx.plans[0].report.step_time_s);
  EXPECT_FALSE(search(load("llama3.1-8b"), load_cluster("dgx-a100").value(), o).ok());  // no FP8 on A100
}

TEST(Export, ExpertContextAndFp8Flags) {
  Plan p = plan(2, 2, 4, 8, 8192);
  p.sequence_parallel = true;
  p.zero = 1;
  p.global_batch = 8;
  p.precision = Precision::kFp8;
  const std::string args = megatron_arguments(load("deepseek-v2-lite"), p).value();
  for (const char* flag : {"--context-parallel-size 2", "--cp-comm-type p2p", "--expert-model-parallel-size 8",
                           "--expert-tensor-parallel-size 2", "--num-experts 64", "--moe-router-topk 6",
                           "--moe-ffn-hidden-size 1408", "--ffn-hidden-size 10944",
                           "--moe-shared-expert-intermediate-size 2816", "--moe-layer-freq '([0]*1+[1]*26)'",
                           "--multi-latent-attention", "--kv-lora-rank 512", "--qk-head-dim 128",
                           "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--bf16", "--fp8-format hybrid",
                           "--fp8-recipe delayed"})
    EXPECT_NE(args.find(flag), std::string::npos) << flag << " in " << args;
  EXPECT_EQ(args.find("--rotary-percent"), std::string::npos);
  Plan deepep = p;
  deepep.execution.moe_dispatcher = MoeDispatcher::kDeepEp;
  const std::string flex = megatron_arguments(load("deepseek-v2-lite"), deepep).value();
  EXPECT_NE(flex.find("--moe-token-dispatcher-type flex --moe-enable-deepep"), std::string::npos) << flex;
  // Offload with fp8_param_gather: Megatron's validate_args wants the delayed recipe.
  Plan offload = p;
  offload.offload = true, offload.execution.fp8_param_gather = true, offload.execution.fp8_recipe = Fp8Recipe::kCurrent;
  EXPECT_NE(megatron_arguments(load("deepseek-v2-lite"), offload).error().find("needs fp8_recipe delayed"), std::string::npos);
  offload.execution.fp8_recipe = Fp8Recipe::kDelayed;
  EXPECT_TRUE(megatron_arguments(load("deepseek-v2-lite"), offload).ok());
  // What the model was priced with is exported: its norm epsilon, and Qwen3's q/k norms.
  EXPECT_NE(args.find("--norm-epsilon 1e-06 "), std::string::npos) << args;
  EXPECT_EQ(args.find("--qk-layernorm"), std::string::npos);
  const std::string qwen3 = testing::TempDir() + "/qwen3-0.6b.json";
  std::ofstream(qwen3) << R"({"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
    "tie_word_embeddings": true, "hidden_act": "silu"})";
  Plan dense = plan(2, 1, 4, 1, 4096);
  dense.sequence_parallel = true;
  const std::string qwen3_args = megatron_arguments(load_model(qwen3).value(), dense).value();
  EXPECT_NE(qwen3_args.find("--qk-layernorm"), std::string::npos) << qwen3_args;
  // Megatron declares --rotary-base an int: Mixtral's theta 1e6 as 1000000, never 1e+06.
  Plan mixtral = plan(2, 1, 4, 1, 4096);
  mixtral.sequence_parallel = true;
  const std::string mixtral_args = megatron_arguments(load("mixtral-8x7b"), mixtral).value();
  EXPECT_NE(mixtral_args.find("--rotary-base 1000000 "), std::string::npos) << mixtral_args;
  EXPECT_EQ(mixtral_args.find("e+06"), std::string::npos);
  // DeepSpeed: EP through AutoEP, Ulysses only, no FP8.
  Plan ds = plan(1, 2, 4, 2, 8192);
  ds.execution.cp_comm = CpComm::kAllToAll;
  const nlohmann::json j = deepspeed_config(ds).value();
  EXPECT_EQ(j["expert_parallel"]["autoep_size"], 2);
  EXPECT_EQ(j["sequence_parallel_size"], 2);
  ds.execution.cp_comm = CpComm::kP2p;
  EXPECT_FALSE(deepspeed_config(ds).ok());
}

TEST(RuntimeSupport, RefusesWhatIsNotBuilt) {
  const ModelSpec llama = load("llama3-8b");
  Plan p = plan(1, 2, 1, 1, 4096);
  EXPECT_TRUE(check_runtime_support(llama, p).ok());  // the ring
  p.execution.cp_comm = CpComm::kAllGather;
  EXPECT_TRUE(check_runtime_support(llama, p).ok());
  p.execution.cp_comm = CpComm::kAllToAll;
  EXPECT_NE(check_runtime_support(llama, p).error().find("cp_comm a2a"), std::string::npos);
  p.execution.cp_comm = CpComm::kP2p;
  EXPECT_NE(check_runtime_support(load("gpt2"), p).error().find("learned positions"), std::string::npos);
  EXPECT_FALSE(check_gpu_support(llama, p, true).ok());
  p.cp = 1;
  p.precision = Precision::kFp8;
  EXPECT_NE(check_runtime_support(llama, p).error().find("fp8"), std::string::npos);
  EXPECT_NE(check_gpu_support(llama, p, true).error().find("fp8"), std::string::npos);
  // Mixtral-style MoE trains with EP and ZeRO 0-3; DeepSeek's shared experts and MLA do not.
  const ModelSpec mixtral = load("mixtral-8x7b");
  Plan e = plan(1, 1, 2, 2, 4096);
  for (int zero : {0, 1, 2, 3}) {
    e.zero = zero;
    EXPECT_TRUE(check_runtime_support(mixtral, e).ok()) << zero;
  }
  EXPECT_NE(check_runtime_support(load("deepseek-v2-lite"), plan(1, 1, 2, 2, 4096)).error().find("shared experts"),
            std::string::npos);
  EXPECT_FALSE(check_gpu_support(mixtral, plan(1, 1, 2, 2, 4096), true).ok());
}

}  // namespace
}  // namespace parallax
