#include "planner/estimate.h"

#include <algorithm>

#include "simulator/collective_cost.h"
#include "simulator/compute_cost.h"

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
}  // namespace

double pipeline_time_s(const Plan& p, int64_t m, const StageTimes& slowest, const StageTimes& mean,
                       double* bubble_fraction) {
  double fill = 0;
  switch (p.schedule) {
    case Schedule::kGpipe:
    case Schedule::k1F1B: fill = d(p.pp - 1) * mean.total(); break;
    case Schedule::kInterleaved: fill = d(p.pp - 1) / d(p.virtual_stages) * mean.total(); break;
    case Schedule::kZbH1: fill = d(p.pp - 1) * std::max(0.0, mean.f + mean.b - mean.w); break;
  }
  const double total = d(m) * slowest.total() + fill;
  *bubble_fraction = total > 0 ? 1.0 - d(m) * mean.total() / total : 0.0;
  return total;
}

namespace {

// Exposed time of a reduction that may overlap `window_s` of backward compute, in buckets.
double exposed_reduction(double time_s, double window_s, double bytes, const Plan& p) {
  if (!p.execution.overlap_grad_reduce) return time_s;
  const double buckets = std::max(1.0, bytes / (p.execution.dp_bucket_mib * 1048576.0));
  return std::max(time_s / buckets, time_s - window_s);
}

}  // namespace

TierBytes bytes_by_tier(const ClusterSpec& c, const Plan& plan, const CommBytes& b) {
  TierBytes t;
  const std::pair<double, LinkTier> kinds[] = {
      {b.tp, group_link(c, plan, GroupKind::kTp)}, {b.pp, group_link(c, plan, GroupKind::kPp)},
      {b.dp - b.dp_replica - b.dp_expert, group_link(c, plan, GroupKind::kDp)},
      {b.dp_replica, group_link(c, plan, GroupKind::kDpReplica)}, {b.dp_expert, group_link(c, plan, GroupKind::kExpertDp)},
      {b.cp, group_link(c, plan, GroupKind::kCp)}, {b.ep, group_link(c, plan, GroupKind::kEp)}};
  for (const auto& [bytes, link] : kinds) (link.crosses_nodes ? t.network : t.nvlink) += bytes;
  return t;
}

StepReport estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const LayerTiming layer = layer_timing(m, c, plan);
  return estimate_step(m, c, plan, layer, edge_timing(m, c, plan, layer));
}

namespace {

StepReport estimate_with(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, const LayerTiming& lt,
                         const EdgeTiming& et) {
  StepReport e;
  const int64_t mbs = plan.micro_batches(), p = plan.pp, v = plan.virtual_stages;
  // The slowest stage sets the pace: with uneven stages, the one with the most layers.
  const double layers = d(plan.max_stage_layers(m.layers));
  const double overhead = plan.execution.microbatch_overhead_us * 1e-6;

  // Pipeline send/recv: the boundary activation (or its gradient), once per chunk per micro-batch.
  const P2pCost p2p = pipeline_transfer(m, c, plan);
  const double p2p_s = p > 1 && !plan.execution.overlap_p2p ? d(v) * p2p.time_s : 0;

  // The calibrated host cost of a micro-batch's forward or backward over the stage's v chunks.
  const double chunk_s = d(v) * c.calibration.host_cost(plan.execution.framework).chunk_s(layers / d(v), v);
  StageTimes mid{layers * lt.forward_s + p2p_s + overhead + chunk_s, layers * lt.backward_input_s + p2p_s + chunk_s,
                 layers * lt.backward_weight_s};
  StageTimes first = mid, last = mid;
  first.f += et.first_forward_s;
  first.b += et.first_backward_s;
  last.f += et.last_forward_s;
  last.b += et.last_backward_input_s;
  last.w += et.last_backward_weight_s;
  if (p == 1) first = last = StageTimes{first.f + et.last_forward_s, first.b + et.last_backward_input_s,
                                        first.w + et.last_backward_weight_s};
  StageTimes slowest = first.total() >= last.total() ? first : last;
  if (mid.total() > slowest.total()) slowest = mid;
  StageTimes mean = first;
  if (p > 1) {
    const double n = d(p);
    mean = {(first.f + last.f + (n - 2) * mid.f) / n, (first.b + last.b + (n - 2) * mid.b) / n,
            (first.w + last.w + (n - 2) * mid.w) / n};
  }
  e.pipeline_s = pipeline_time_s(plan, mbs, slowest, mean, &e.bubble_fraction);
  e.tp_exposed_s = d(mbs) * layers * lt.tp_comm_s;

  // Data parallel and ZeRO on the stage with the most parameters; with EP the experts' part
  // reduces over its own ranks (below), without it they are dense weights.
  const StageParams first_params = stage_param_split(m, plan, 0), last_params = stage_param_split(m, plan, p - 1);
  const StageParams heaviest = first_params.total() >= last_params.total() ? first_params : last_params;
  const StageParams split = plan.ep == 1 ? StageParams{heaviest.total(), 0} : heaviest;
  const double params = split.dense;
  const ModelStateBytesPerParam bpp = bytes_per_param(plan);
  const double grads = params * bpp.gradients, weights = params * bpp.gathered;
  const LinkTier dpl = group_link(c, plan, GroupKind::kDp);
  const int64_t n = plan.shard_degree(), replicas = plan.data_ranks() / n;
  // A pass's ZeRO-2/3 collectives go one unit (layer) at a time, each paying the ring's latency
  // (OpCosts::duration_s); the rest once a step.
  const double units = plan.zero >= 2 ? std::max(1.0, layers) : 1.0;
  auto unit_time = [&](Collective op, double bytes, int64_t ranks, const LinkTier& link) {
    return units * collective_time_s(op, bytes / units, ranks, link);
  };
  auto time = [&](Collective op, double bytes) { return collective_time_s(op, bytes, n, dpl); };
  auto sent = [&](Collective op, double bytes) { return collective_bytes_per_rank(op, bytes, n); };
  // Hybrid sharding: each reduce-scatter's shard is then all-reduced over the replicas.
  const LinkTier rl = group_link(c, plan, GroupKind::kDpReplica);
  const double shard_grads = grads / d(n);
  const double replica_s = plan.zero >= 1 ? unit_time(Collective::kAllReduce, shard_grads, replicas, rl) : 0.0;
  const double replica_sent = plan.zero >= 1 ? collective_bytes_per_rank(Collective::kAllReduce, shard_grads, replicas) : 0.0;
  // Offload with ZeRO-2/3: each micro-batch's gradient shard goes to host memory, and with ZeRO-3
  // the weight shard comes back before every pass, over PCIe (as the step program's ops).
  const double pcie_Bps = c.host.pcie_gbps * 1e9;
  const double grads_to_host_s = plan.offload && plan.zero >= 2 ? shard_grads / pcie_Bps : 0.0;
  const double weights_from_host_s = plan.offload && plan.zero >= 3 ? weights / d(n) / pcie_Bps : 0.0;
  const double window = slowest.b + slowest.w;
  const double fm = d(mbs);
  // EP: the experts' gradients reduce over the expert data-parallel ranks (ZeRO-1: then their
  // weights gather back; ZeRO-2/3: every pass's, and ZeRO-3 gathers them before each pass).
  const int64_t edp = plan.expert_data_ranks();
  const bool experts = split.expert > 0 && edp > 1;
  const LinkTier el = group_link(c, plan, GroupKind::kExpertDp);
  const double eg = split.expert * bpp.gradients, ew = split.expert * bpp.gathered;
  const double expert_rs = experts && plan.zero >= 2 ? unit_time(Collective::kReduceScatter, eg, edp, el) : 0.0;
  const double expert_ag = experts && plan.zero == 3 ? unit_time(Collective::kAllGather, ew, edp, el) : 0.0;
  const double expert_sent = experts && plan.zero >= 2 ? collective_bytes_per_rank(Collective::kReduceScatter, eg, edp) : 0.0;
  // Each stage's bytes per micro-batch (ZeRO-2/3) or per step, by group.
  const double expert_ag_sent = experts ? collective_bytes_per_rank(Collective::kAllGather, ew, edp) : 0.0;
  CommBytes& b = e.comm_bytes_per_gpu;
  switch (plan.zero) {
    case 0:
      e.dp_exposed_s = exposed_reduction(time(Collective::kAllReduce, grads), window, grads, plan);
      b.dp = sent(Collective::kAllReduce, grads);
      break;
    case 1:  // reduce-scatter gradients once, all-gather updated weights after the step
      e.dp_exposed_s = exposed_reduction(time(Collective::kReduceScatter, grads) + replica_s, window, grads, plan) +
                       time(Collective::kAllGather, weights);
      b.dp_replica = replica_sent;
      b.dp = sent(Collective::kReduceScatter, grads) + sent(Collective::kAllGather, weights);
      break;
    case 2: {  // gradients are sharded, so every micro-batch's are reduce-scattered, from its first unit on
      const double rs = unit_time(Collective::kReduceScatter, grads, n, dpl) + replica_s + grads_to_host_s + expert_rs;
      const double expert_weights_s = experts ? collective_time_s(Collective::kAllGather, ew, edp, el) : 0.0;
      e.dp_exposed_s = fm * std::max(rs / units, rs - window * (1 - 1 / units)) + time(Collective::kAllGather, weights) +
                       expert_weights_s;
      b.dp_replica = fm * replica_sent;
      b.dp_expert = fm * expert_sent + expert_ag_sent;
      b.dp = fm * sent(Collective::kReduceScatter, grads) + sent(Collective::kAllGather, weights);
      break;
    }
    default: {  // 3: per micro-batch the dp stream gathers for forward and backward and reduces, beneath both
      const double ag = unit_time(Collective::kAllGather, weights, n, dpl) + weights_from_host_s + expert_ag;
      const double rs = unit_time(Collective::kReduceScatter, grads, n, dpl) + replica_s + grads_to_host_s + expert_rs;
      e.dp_exposed_s = fm * (std::max(0.0, 2 * ag + rs - slowest.f - window) + 2 * d(v) * ag / units);
      b.dp_replica = fm * replica_sent;
      b.dp_expert = fm * (expert_sent + 2 * expert_ag_sent);
      b.dp = fm * (2 * sent(Collective::kAllGather, weights) + sent(Collective::kReduceScatter, grads));
    }
  }
  if (experts && plan.zero <= 1) {  // once a step, after the dense buckets
    const Collective reduce = plan.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter;
    e.dp_exposed_s += exposed_reduction(collective_time_s(reduce, eg, edp, el), window, eg, plan) +
                      (plan.zero == 1 ? collective_time_s(Collective::kAllGather, ew, edp, el) : 0.0);
    b.dp_expert = collective_bytes_per_rank(reduce, eg, edp) + (plan.zero == 1 ? expert_ag_sent : 0.0);
  }
  b.dp += b.dp_replica + b.dp_expert;

  e.optimizer_s = optimizer_step_s(c, plan, heaviest);
  e.overhead_s = plan.execution.step_overhead_us * 1e-6;
  e.step_time_s = e.pipeline_s + e.dp_exposed_s + e.optimizer_s + e.overhead_s;

  e.comm_bytes_per_gpu.tp = fm * layers * lt.tp_bytes;
  e.comm_bytes_per_gpu.cp = fm * layers * lt.cp_bytes;
  e.comm_bytes_per_gpu.ep = fm * layers * lt.ep_bytes;
  e.comm_bytes_per_gpu.pp = p > 1 ? 2 * fm * d(v) * p2p.bytes : 0;
  e.memory = peak_memory(m, plan, c.gpu.reserved_gib * 1073741824.0);
  finish_report(m, c, plan, e);
  return e;
}

}  // namespace

StepReport estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, const LayerTiming& lt,
                       const EdgeTiming& et) {
  // With the all-to-alls overlapped, every pass but a stage's first and last few runs beside the
  // opposite one: the estimate prices them all so.
  if (plan.execution.moe_a2a_overlap && plan.ep > 1)
    return estimate_with(m, c, plan,
                         exchange_overlapped(lt, splits_weight_gradients(plan.schedule), c.calibration.ep_overlap_exposed), et);
  return estimate_with(m, c, plan, lt, et);
}

void finish_report(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, StepReport& e) {
  e.tier_bytes_per_gpu = bytes_by_tier(c, plan, e.comm_bytes_per_gpu);
  e.model_flops = model_flops_per_step(m, plan.seq_len, plan.global_batch);
  e.hardware_flops = hardware_flops_per_step(m, plan.seq_len, plan.global_batch, plan.recompute, plan.execution.selective,
                                             plan.execution.attention, plan.execution.recompute_fraction,
                                             plan.execution.recompute_modules);
  const double gpus = d(plan.gpus());
  e.tokens_per_s = d(plan.global_batch) * d(plan.seq_len) / e.step_time_s;
  e.model_tflops_per_gpu = e.model_flops / e.step_time_s / gpus / 1e12;
  e.hardware_tflops_per_gpu = e.hardware_flops / e.step_time_s / gpus / 1e12;
  // Against the peak of the precision the GEMMs run in: an FP8 plan's MFU is a share of the FP8 peak.
  e.mfu = e.model_tflops_per_gpu * 1e12 / c.gpu.peak_flops(plan.precision);
  e.hfu = e.hardware_tflops_per_gpu * 1e12 / c.gpu.peak_flops(plan.precision);
  e.peak_memory_bytes = e.memory.total();
  e.fits_in_memory = e.peak_memory_bytes <= c.gpu.hbm_bytes();
  e.fits_in_host_memory = e.memory.host * d(c.node.gpus) <= c.host.memory_gib * 1073741824.0;
}

}  // namespace parallax
