#include "simulator/collective_cost.h"

#include <gtest/gtest.h>

#include "test_cluster.h"

namespace parallax {
namespace {

ClusterSpec round() { return cluster_from_json(testing_support::round_cluster_json(), "round").value(); }

TEST(Placement, FollowsRankOrder) {
  // TP 8 (stride 1) fills one node.
  GroupPlacement tp = place_group(8, 1, 8);
  EXPECT_EQ(tp.ranks_per_node, 8);
  EXPECT_EQ(tp.nodes, 1);
  // DP 16 with TP 4: members 4 apart, 2 per node, 8 nodes.
  GroupPlacement dp = place_group(16, 4, 8);
  EXPECT_EQ(dp.ranks_per_node, 2);
  EXPECT_EQ(dp.nodes, 8);
  // PP 4 with TP x DP = 64: one member per node.
  GroupPlacement pp = place_group(4, 64, 8);
  EXPECT_EQ(pp.ranks_per_node, 1);
  EXPECT_EQ(pp.nodes, 4);
  // DP 2 with TP 2: both inside one node.
  EXPECT_EQ(place_group(2, 2, 8).nodes, 1);
}

TEST(Links, IntraNodeAndNetwork) {
  const ClusterSpec c = round();
  LinkTier nv = group_link(c, place_group(8, 1, 8));
  EXPECT_FALSE(nv.crosses_nodes);
  EXPECT_DOUBLE_EQ(nv.busbw_Bps, 100e9);
  EXPECT_DOUBLE_EQ(nv.latency_s, 1e-6);
  // 2 members per node, 4 nodes (one leaf): 2 NICs x 10 GB/s = 20 GB/s.
  LinkTier net = group_link(c, place_group(8, 4, 8));
  EXPECT_TRUE(net.crosses_nodes);
  EXPECT_DOUBLE_EQ(net.busbw_Bps, 20e9);
  EXPECT_DOUBLE_EQ(net.latency_s, 10e-6);
  // 8 nodes > 4 per leaf with oversubscription 2: 1 NIC x 10 GB/s / 2 = 5 GB/s.
  EXPECT_DOUBLE_EQ(group_link(c, place_group(8, 8, 8)).busbw_Bps, 5e9);
  // 8 members per node would be 80 GB/s of NICs; NVLink's 100 GB/s does not cap it.
  EXPECT_DOUBLE_EQ(group_link(c, place_group(16, 1, 8)).busbw_Bps, 80e9);
}

// Ring all-reduce of S = 1 GB over n = 8 at 100 GB/s busbw and 1 us per step:
//   2(n-1) alpha + 2(n-1)/n S / busbw = 14 us + 1.75e9 / 100e9 s = 14 us + 17.5 ms = 17.514 ms;
// reduce-scatter and all-gather: 7 us + 8.75 ms; send/recv: 1 us + 10 ms.
// NCCL's protocols on the round cluster (100 GB/s busbw in a node; 10 GB/s NICs, 10 us network
// latency). An 8-rank all-gather in a node (7 NVLink steps), per rank (7/8) S:
//   LL     6.6 + 7 x 0.6 = 10.8 us + bytes / 50 GB/s
//   LL128  14 + 7 x 1.9 = 27.3 us + bytes / 92 GB/s
//   Simple 8.4 + 7 x 3.4 = 32.2 us + bytes / 100 GB/s
// S = 1 MB (875 kB): LL 28.3 us (LL128 36.81, Simple 40.95). S = 4 MB (3.5 MB): LL128
// 27.3 + 38.043478 = 65.343478 us (LL 80.8, Simple 67.2). S = 1 GB: Simple 32.2 us + 8.75 ms.
// All-reduce of 1 GB (14 steps): Simple 8.4 + 47.6 us + 17.5 ms = 17.556 ms, under the tree's
// 14 us + 20 ms. Across 4 nodes (2 members each, 20 GB/s), 3 of the 7 steps cross: Simple
// 8.4 + 4 x 3.4 + 3 x (14 + 2 x 10) = 124 us + 0.875e9 / 20e9 s = 43.874 ms.
TEST(Collectives, NcclProtocolsPerMessageSize) {
  ClusterSpec c = round();
  c.node.nccl_protocols = true;
  const LinkTier link = group_link(c, place_group(8, 1, 8));
  EXPECT_NEAR(collective_time_s(Collective::kAllGather, 1e6, 8, link), 28.3e-6, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kReduceScatter, 4e6, 8, link), 65.3434783e-6, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllGather, 1e9, 8, link), 0.0087822, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 8, link), 0.017556, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllGather, 1e9, 8, group_link(c, place_group(8, 4, 8))), 0.043874, 1e-12);
}

// NVLS all-reduce on the round cluster given 160 GB/s NVLS busbw over its 8 GPUs, 100 us fixed,
// from 5 ranks: algbw = 160 x 8 / 14 = 91.428571 GB/s whatever the group's size.
//   8 ranks, 1 GB: NVLS 100 us + 1e9 / 91.428571e9 s = 11.0375 ms; the ring (Simple) 17.556 ms.
//   8 ranks, 1 MB: NVLS 110.9375 us, the ring's LL 10.8 + 1.75e6 / 50e9 s = 45.8 us; the tree's
//   2 x 7 x 1 us + 2e6 / 100e9 s = 34 us wins.
//   5 ranks, 1 GB: NVLS 11.0375 ms again (the ring: 8.4 + 8 x 3.4 us + 1.6e9 / 100e9 s = 16.0356 ms).
//   4 ranks: no NVLS (the ring, 8.4 + 6 x 3.4 us + 1.5e9 / 100e9 s = 15.0288 ms). Across nodes,
//   within one node but for reduce-scatter, or with TP overlap's userbuffers: never.
TEST(Collectives, NvlsAllReduceInsideANode) {
  ClusterSpec c = round();
  c.node.nccl_protocols = true;
  c.node.nvls_busbw_gbps = 160;
  c.node.nvls_latency_us = 100;
  c.node.nvls_min_ranks = 5;
  const LinkTier eight = group_link(c, place_group(8, 1, 8));
  EXPECT_NEAR(eight.nvls_algbw_Bps, 160e9 * 8 / 14, 1e-3);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 8, eight), 100e-6 + 1e9 / (160e9 * 8 / 14), 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 8, eight), 0.0110375, 1e-9);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e6, 8, eight), 34e-6, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kReduceScatter, 1e9, 8, eight), 0.0087822, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 5, group_link(c, place_group(5, 1, 8))), 0.0110375, 1e-9);
  const LinkTier four = group_link(c, place_group(4, 1, 8));
  EXPECT_DOUBLE_EQ(four.nvls_algbw_Bps, 0);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 4, four), 0.0150288, 1e-12);
  EXPECT_DOUBLE_EQ(group_link(c, place_group(16, 1, 8)).nvls_algbw_Bps, 0);
}

TEST(Collectives, RingAlphaBeta) {
  const LinkTier link = group_link(round(), place_group(8, 1, 8));
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 8, link), 0.017514, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kReduceScatter, 1e9, 8, link), 0.008757, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kAllGather, 1e9, 8, link), 0.008757, 1e-12);
  EXPECT_NEAR(collective_time_s(Collective::kSendRecv, 1e9, 2, link), 0.010001, 1e-12);
  EXPECT_DOUBLE_EQ(collective_time_s(Collective::kAllReduce, 1e9, 1, link), 0);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kAllReduce, 1e9, 8), 1.75e9);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kAllGather, 1e9, 8), 0.875e9);
  EXPECT_DOUBLE_EQ(collective_bytes_per_rank(Collective::kSendRecv, 1e9, 2), 1e9);
}

// Tree vs ring for all-reduce over 64 ranks across nodes (10 us, 5 GB/s here):
//   1 KB: ring 126 * 10 us + 2 * 63/64 KB / 5 GB/s = 1.2604 ms; tree 2 * 6 * 10 us + 2 KB / 5 GB/s
//   = 0.1204 ms -> tree. 1 GB: ring 1.26 ms + 393.75 ms; tree 0.12 ms + 400 ms -> ring.
TEST(Collectives, TreeForSmallMessagesRingForLarge) {
  const LinkTier link = group_link(round(), place_group(64, 8, 8));
  ASSERT_DOUBLE_EQ(link.busbw_Bps, 5e9);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e3, 64, link), 120e-6 + 2e3 / 5e9, 1e-15);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 1e9, 64, link), 126 * 10e-6 + 2 * 63.0 / 64 * 1e9 / 5e9, 1e-12);
}

// Latency as NCCL's tuner counts it: 64 ranks, 8 per node (stride 1), 8 nodes, 1 us NVLink and
// 10 us network steps. Ring all-reduce: 126 steps, 2 * 7 = 14 between nodes: 14 * 10 + 112 * 1 =
// 252 us. Reduce-scatter: 63 steps, 7 between nodes: 70 + 56 = 126 us. Tree: 2 * (7 * 1 + 3 * 10)
// = 74 us. Bandwidth terms as before (40 GB/s here: 8 NICs of 10 GB/s, halved by the
// oversubscription of 8 nodes > 4 per leaf).
TEST(Collectives, OnlyStepsBetweenNodesPayTheNetworkLatency) {
  const LinkTier link = group_link(round(), place_group(64, 1, 8));
  ASSERT_DOUBLE_EQ(link.busbw_Bps, 40e9);
  EXPECT_NEAR(collective_time_s(Collective::kReduceScatter, 0, 64, link), 126e-6, 1e-15);
  EXPECT_NEAR(tree_allreduce_time_s(0, 64, link), 74e-6, 1e-15);
  EXPECT_NEAR(collective_time_s(Collective::kAllReduce, 8e9, 64, link), 252e-6 + 2 * 63.0 / 64 * 8e9 / 40e9, 1e-12);
}

}  // namespace
}  // namespace parallax
