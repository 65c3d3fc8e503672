// Collective and point-to-point communication cost on a ClusterSpec, in the nccl-tests
// convention: an all-reduce of S bytes over n ranks moves 2(n-1)/n * S per rank and, on a ring,
// takes 2(n-1) * alpha + 2(n-1)/n * S / busbw; reduce-scatter and all-gather half of both; send/recv
// alpha + S / bw. Where a group sits (inside one node or across nodes) follows from the rank order
// of DESIGN.md: TP innermost, then DP, then PP.
#pragma once

#include <cstdint>

#include "program/collective.h"
#include "simulator/cluster_spec.h"

namespace parallax {


// How a communication group of `size` ranks, consecutive members `stride` ranks apart, lies on
// nodes of `gpus_per_node` GPUs.
struct GroupPlacement {
  int64_t size = 1;
  int64_t ranks_per_node = 1;  // members of the group inside one node
  int64_t nodes = 1;           // nodes the group spans
};
GroupPlacement place_group(int64_t size, int64_t stride, int64_t gpus_per_node);

// The link a group's ring runs at: NVLink inside a node; across nodes, the group's NICs in one node
// together (one per member, capped by NVLink), reduced by the fat tree's oversubscription when the
// group leaves a leaf switch.
struct LinkTier {
  double busbw_Bps = 0;  // bytes per second
  double latency_s = 0;  // per ring step across nodes (within a node when the group fits one)
  double intra_latency_s = 0;  // per step between GPUs of one node
  int64_t nodes = 1, ranks_per_node = 1;
  bool crosses_nodes = false;
  int64_t sms = 0;  // SMs a collective on this link holds on each GPU (cluster nccl_sms)
  double intra_busbw_Bps = 0;  // NVLink inside a node, for the part of an all-to-all that stays there
  bool nccl_protocols = false;  // rings as NCCL's LL, LL128 and Simple (the cluster node's flag)
  double nvls_algbw_Bps = 0, nvls_latency_s = 0;  // NVLS all-reduce in this group; 0: not available
};
LinkTier group_link(const ClusterSpec& c, const GroupPlacement& g);

// Time of that collective; 0 for a group of one. All-reduce takes the faster of a ring and a tree,
// as NCCL's tuner does: the tree's log-depth latency wins for small messages over many ranks, the
// ring's bandwidth for large ones. Other collectives run as rings. Latency as NCCL's tuner models
// it (src/graph/tuning.cc): of a ring's steps only those between nodes (2(nodes - 1) for an
// all-reduce, nodes - 1 otherwise) pay the network's latency, the rest NVLink's; a tree pays
// 2((ranks per node - 1) intra + ceil(log2 nodes) inter). An all-to-all sends S/n to each peer
// at once: the share to peers in other nodes through this GPU's NIC (the tier's bandwidth over its
// ranks per node), beside the share to its node's peers over NVLink; one step's latency.
//
// With `nccl_protocols` a ring is priced as NCCL's tuner prices each protocol and takes the
// fastest (NVIDIA/nccl@5067397 src/graph/tuning.cc, ring): a base latency (LL 6.6, LL128 14.0,
// Simple 8.4 us), per NVLink step 0.6 / 1.9 / 3.4 us, per network step 2.7 / 4.0 / 14.0 us plus
// the network's latency (twice for Simple, its flush), and the bytes at 0.5 / 0.92 / 1.0 of busbw
// (LL's flags halve its payload; LL128 carries 120 of 128 bytes). Small messages take LL, mid
// sizes LL128, large ones Simple: an 8-GPU all-reduce reaches half its busbw near 16 MiB, not the
// 4 MiB one protocol at NVLink's latency gives.
//
// A group inside one node of at least the node's `nvls_min_ranks` GPUs may also all-reduce with
// NVLS (NVSwitch multicast): nvls_latency_us + S / algbw. NCCL's tuner credits NVLS with 25 us,
// but measured NVLS steps ramp slowly: on 8 H100s (DGX Cloud's nccl-tests sample) the time less
// S at the 8 GiB algbw is 63 us at 16 MiB, 80 at 64 MiB, 134 at 256 MiB and 115 at 1 GiB, so the
// bundled Hoppers state 134 us. With it NVLS wins from 69 MiB and prices that curve within 3% from
// 256 MiB to 8 GiB (+6% at 128 MiB), where the ring alone at 370 GB/s is 19-30% slow; below, the
// ring (+9% at 16 MiB, +15% at 64 MiB) stays.
double collective_time_s(Collective op, double bytes, int64_t n, const LinkTier& link);
double tree_allreduce_time_s(double bytes, int64_t n, const LinkTier& link);

}  // namespace parallax
