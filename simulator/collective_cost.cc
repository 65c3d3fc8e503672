#include "simulator/collective_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace parallax {

GroupPlacement place_group(int64_t size, int64_t stride, int64_t gpus_per_node) {
  GroupPlacement g;
  g.size = size;
  // Members are stride apart; a node of gpus_per_node consecutive ranks holds gpus_per_node/stride
  // of them (at least one).
  g.ranks_per_node = std::clamp<int64_t>(gpus_per_node / std::max<int64_t>(stride, 1), 1, size);
  g.nodes = (size + g.ranks_per_node - 1) / g.ranks_per_node;
  return g;
}

LinkTier group_link(const ClusterSpec& c, const GroupPlacement& g) {
  LinkTier link;
  link.intra_latency_s = c.node.latency_us * 1e-6;
  const double eff = c.calibration.collective_efficiency;  // calibrated (calibration.h); 1 = the measured busbw
  link.intra_busbw_Bps = eff * c.node.busbw_gbps * 1e9;
  link.nccl_protocols = c.node.nccl_protocols;
  link.nodes = g.nodes;
  link.ranks_per_node = g.ranks_per_node;
  if (g.nodes <= 1) {
    link.busbw_Bps = eff * c.node.busbw_gbps * 1e9;
    link.latency_s = c.node.latency_us * 1e-6;
    link.sms = c.node.nccl_sms;
    if (c.node.nvls_busbw_gbps > 0 && g.size >= c.node.nvls_min_ranks && c.node.gpus > 1) {
      // nccl-tests' busbw is algbw x 2(n - 1)/n; NVLS's algbw does not fall with fewer ranks.
      const double n = static_cast<double>(c.node.gpus);
      link.nvls_algbw_Bps = eff * c.node.nvls_busbw_gbps * 1e9 * n / (2 * (n - 1));
      link.nvls_latency_s = c.node.nvls_latency_us * 1e-6;
    }
    return link;
  }
  double bw = std::min(c.node.busbw_gbps, static_cast<double>(g.ranks_per_node) * c.network.bw_per_gpu_gbps);
  if (c.network.nodes_per_leaf > 0 && g.nodes > c.network.nodes_per_leaf) bw /= c.network.oversubscription;
  link.busbw_Bps = eff * bw * 1e9;
  link.latency_s = c.network.latency_us * 1e-6;
  link.crosses_nodes = true;
  link.sms = c.network.nccl_sms;
  return link;
}

namespace {

// NCCL's ring cost per protocol (collective_cost.h), the fastest of LL, LL128 and Simple.
double nccl_ring_time_s(double bytes_per_rank, int64_t steps, int64_t inter, const LinkTier& link) {
  struct Protocol {
    double base_s, nvlink_step_s, net_step_s, flushes, slowdown;  // slowdown: 1 / its share of busbw
  };
  static constexpr Protocol kProtocols[] = {{6.6e-6, 0.6e-6, 2.7e-6, 1, 2.0},
                                            {14.0e-6, 1.9e-6, 4.0e-6, 1, 1.0 / 0.92},
                                            {8.4e-6, 3.4e-6, 14.0e-6, 2, 1.0}};
  const double transfer_s = bytes_per_rank / link.busbw_Bps;
  const double nvlink_steps = static_cast<double>(steps - inter), net_steps = static_cast<double>(inter);
  double best = std::numeric_limits<double>::infinity();
  for (const Protocol& p : kProtocols)
    best = std::min(best, p.base_s + nvlink_steps * p.nvlink_step_s + net_steps * (p.net_step_s + p.flushes * link.latency_s) +
                              transfer_s * p.slowdown);
  return best;
}

}  // namespace

double collective_time_s(Collective op, double bytes, int64_t n, const LinkTier& link) {
  if (op == Collective::kSendRecv) return link.latency_s + bytes / link.busbw_Bps;
  if (n <= 1) return 0;
  if (op == Collective::kAllToAll) {
    const double per_peer = bytes / static_cast<double>(n);
    if (!link.crosses_nodes) return link.latency_s + static_cast<double>(n - 1) * per_peer / link.busbw_Bps;
    const double rpn = static_cast<double>(link.ranks_per_node);
    const double out_s = (static_cast<double>(n) - rpn) * per_peer / (link.busbw_Bps / rpn);
    const double in_node_s = (rpn - 1) * per_peer / link.intra_busbw_Bps;
    return link.latency_s + std::max(out_s, in_node_s);
  }
  const int64_t twice = op == Collective::kAllReduce ? 2 : 1;
  const int64_t steps = twice * (n - 1), inter = link.nodes > 1 ? std::min(steps, twice * (link.nodes - 1)) : 0;
  const double per_rank = collective_bytes_per_rank(op, bytes, n);
  const double ring = link.nccl_protocols ? nccl_ring_time_s(per_rank, steps, inter, link)
                                          : static_cast<double>(inter) * link.latency_s +
                                                static_cast<double>(steps - inter) *
                                                    (link.nodes > 1 ? link.intra_latency_s : link.latency_s) +
                                                per_rank / link.busbw_Bps;
  if (op != Collective::kAllReduce) return ring;
  const double nvls = link.nvls_algbw_Bps > 0 ? link.nvls_latency_s + bytes / link.nvls_algbw_Bps
                                              : std::numeric_limits<double>::infinity();
  return std::min({ring, tree_allreduce_time_s(bytes, n, link), nvls});
}

double tree_allreduce_time_s(double bytes, int64_t n, const LinkTier& link) {
  // Reduce up and broadcast down: a chain inside each node, a (double) binary tree between nodes;
  // every rank receives and sends the whole buffer once each way.
  if (link.nodes <= 1) return 2 * static_cast<double>(n - 1) * link.latency_s + 2 * bytes / link.busbw_Bps;
  const double depth = std::ceil(std::log2(static_cast<double>(link.nodes)));
  const double latency = static_cast<double>(link.ranks_per_node - 1) * link.intra_latency_s + depth * link.latency_s;
  return 2 * latency + 2 * bytes / link.busbw_Bps;
}

}  // namespace parallax
