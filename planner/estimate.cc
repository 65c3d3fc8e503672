#include "planner/estimate.h"

#include <algorithm>

#include "simulator/collective_cost.h"
#include "simulator/compute_cost.h"

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
double act_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }
constexpr double kBackwardElementwise = 1.5;

LinkTier tp_link(const ClusterSpec& c, const Plan& p) {
  return group_link(c, place_group(p.tp, 1, c.node.gpus));
}
LinkTier dp_link(const ClusterSpec& c, const Plan& p) {
  return group_link(c, place_group(p.dp, p.tp, c.node.gpus));
}
LinkTier pp_link(const ClusterSpec& c, const Plan& p) {
  return group_link(c, place_group(p.pp, p.tp * p.dp, c.node.gpus));
}
}  // namespace

namespace {

struct GemmTimes {
  double fwd_s = 0, dgrad_s = 0, wgrad_s = 0;  // the weight GEMMs
  double core_s = 0, core_bwd_s = 0;            // the attention core
};

// Forward, input-gradient and weight-gradient GEMMs each have their own shape (and so their own
// wave quantization); the attention core's two backward products are both input gradients.
GemmTimes gemm_times(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const Precision prec = plan.precision;
  GemmTimes t;
  const bool flash = plan.execution.attention == AttentionKernel::kFlash;
  for (const Gemm& g : layer_gemms(m, plan.seq_len, plan.micro_batch, plan.tp)) {
    const bool is_core = std::string_view(g.name) == "scores" || std::string_view(g.name) == "attn_v";
    const double fwd = gemm_time_s(c.gpu, prec, g), dx = gemm_time_s(c.gpu, prec, input_gradient_gemm(g)),
                 dw = gemm_time_s(c.gpu, prec, weight_gradient_gemm(g));
    if (!is_core) {
      t.fwd_s += fwd;
      t.dgrad_s += dx;
      t.wgrad_s += dw;
    } else if (!flash) {
      t.core_s += fwd;
      t.core_bwd_s += dx + dw;
    }
  }
  if (flash) {
    // A fused causal kernel skips the masked half of the s x s square.
    const double tokens = d(plan.seq_len) * d(plan.micro_batch);
    const double core_flops = attention_core_flops_per_token(m, plan.seq_len) * tokens / d(plan.tp);
    t.core_s = flash_attention_time_s(c.gpu, prec, 0.5 * core_flops);
    // The fused backward recomputes the scores: 2.5 x the forward's FLOPs (Dao 2023).
    t.core_bwd_s = 2.5 * t.core_s;
  }
  return t;
}

}  // namespace

LayerTiming layer_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const GpuSpec& gpu = c.gpu;
  const Precision prec = plan.precision;
  const bool flash = plan.execution.attention == AttentionKernel::kFlash;
  const double tokens = d(plan.seq_len) * d(plan.micro_batch);

  const GemmTimes gt = gemm_times(m, c, plan);
  auto elementwise_time = [&](AttentionKernel kernel) {
    const double bytes = layer_elementwise_bytes_per_token(m, plan.seq_len, plan.tp, plan.sequence_parallel, kernel);
    return memory_time_s(gpu, bytes * tokens * act_bytes(prec) / 2.0);
  };
  const double elementwise_s = elementwise_time(plan.execution.attention);
  // The softmax and dropout over materialized scores: what selective recompute re-runs besides
  // the two attention GEMMs.
  const double scores_s = flash ? 0.0 : elementwise_s - elementwise_time(AttentionKernel::kFlash);
  const double core_s = gt.core_s;

  // Two all-reduces forward and two backward (with SP: all-gather + reduce-scatter pairs that
  // move the same bytes in the same time).
  const double tp_msg = tokens * d(m.hidden) * act_bytes(prec);
  const LinkTier link = tp_link(c, plan);
  const double one_ar_s = collective_time_s(Collective::kAllReduce, tp_msg, plan.tp, link);
  const double one_ar_bytes = collective_bytes_per_rank(Collective::kAllReduce, tp_msg, plan.tp);

  LayerTiming t;
  t.forward_s = gt.fwd_s + core_s + elementwise_s + 2 * one_ar_s;
  // Elementwise backward kernels read the saved input and the incoming gradient and write one
  // gradient where the forward read one tensor and wrote one (norms, GELU/SwiGLU, softmax):
  // 3 passes for 2, so 1.5 x the forward's bytes (dropout's backward moves as many as its forward).
  t.backward_input_s = gt.dgrad_s + gt.core_bwd_s + kBackwardElementwise * elementwise_s + 2 * one_ar_s;
  t.backward_weight_s = gt.wgrad_s;
  t.tp_comm_s = 4 * one_ar_s;
  t.tp_bytes = 4 * one_ar_bytes;
  t.tp_forward_s = t.tp_backward_input_s = 2 * one_ar_s;
  if (plan.recompute == Recompute::kFull) {
    t.backward_input_s += t.forward_s;
    t.tp_comm_s += 2 * one_ar_s;
    t.tp_backward_input_s += 2 * one_ar_s;
    t.tp_bytes += 2 * one_ar_bytes;
  } else if (plan.recompute == Recompute::kSelective) {
    t.backward_input_s += core_s + scores_s;
  }
  if (plan.sequence_parallel && plan.tp > 1) {
    // SP stores only the sharded inputs of the two column-parallel GEMMs (QKV, FC1), so their
    // weight gradients need the inputs all-gathered again. Megatron issues these asynchronously
    // beside the dgrad GEMM, but Korthikanti et al. Table 4 shows SP's backward no faster than
    // without SP, i.e. the gathers are not hidden: priced as exposed.
    const double ag_s = collective_time_s(Collective::kAllGather, tp_msg, plan.tp, link);
    t.backward_weight_s += 2 * ag_s;
    t.tp_backward_weight_s = 2 * ag_s;
    t.tp_comm_s += 2 * ag_s;
    t.tp_bytes += 2 * collective_bytes_per_rank(Collective::kAllGather, tp_msg, plan.tp);
  }
  return t;
}

EdgeTiming edge_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const GpuSpec& gpu = c.gpu;
  const double tokens = d(plan.seq_len) * d(plan.micro_batch);
  const double rep = plan.sequence_parallel ? d(plan.tp) : 1.0;
  const double ab = act_bytes(plan.precision);
  EdgeTiming e;
  // Embedding: gather rows (read + write h per token); backward scatters them into the gradient.
  e.first_forward_s = memory_time_s(gpu, 2 * tokens * d(m.hidden) * ab / rep);
  e.first_backward_s = e.first_forward_s;
  // Output layer: tokens x (V/t) x h GEMM; the vocab-parallel cross-entropy reads the logits and
  // writes fp32 softmax (forward), then reads it and writes the gradient (backward).
  const Gemm logits{"logits", static_cast<int64_t>(tokens), m.vocab / plan.tp, m.hidden};
  const double gemm_s = gemm_time_s(gpu, plan.precision, logits);
  const double logits_elems = tokens * d(m.vocab) / d(plan.tp);
  const double norm_s = memory_time_s(gpu, 4 * tokens * d(m.hidden) * ab / rep);
  e.last_forward_s = gemm_s + norm_s + memory_time_s(gpu, logits_elems * (ab + 4 + 4));
  e.last_backward_input_s = gemm_s + 2 * norm_s + memory_time_s(gpu, logits_elems * (4 + ab));
  e.last_backward_weight_s = gemm_s;
  return e;
}

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

double optimizer_step_s(const ClusterSpec& c, const Plan& plan, double stage_params) {
  const double local = stage_params / (plan.zero >= 1 ? d(plan.dp) : 1.0);
  const ModelStateBytesPerParam bpp = bytes_per_param(plan);
  // fp32 has no master copy to cast from: norm (g), Adam (g + 12 read, 12 written), zero (g).
  const double bytes_per_param = plan.precision == Precision::kFp32 ? 3 * bpp.gradients + 24 : 4 * bpp.gradients + 30;
  if (!plan.offload) return local * bytes_per_param / (c.gpu.hbm_gbps * 1e9 * c.gpu.optimizer_efficiency);
  const double host_bw = c.host.memory_gbps * 1e9 / d(c.node.gpus);
  return local * bytes_per_param / host_bw + local * (bpp.gradients + bpp.weights) / (c.host.pcie_gbps * 1e9);
}

TierBytes bytes_by_tier(const ClusterSpec& c, const Plan& plan, const CommBytes& b) {
  TierBytes t;
  const std::pair<double, LinkTier> kinds[] = {
      {b.tp, tp_link(c, plan)}, {b.pp, pp_link(c, plan)}, {b.dp, dp_link(c, plan)}};
  for (const auto& [bytes, link] : kinds) (link.crosses_nodes ? t.network : t.nvlink) += bytes;
  return t;
}

P2pCost pipeline_transfer(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const double tensor = d(plan.seq_len) * d(plan.micro_batch) * d(m.hidden) * act_bytes(plan.precision);
  P2pCost cost;
  cost.bytes = tensor / d(plan.tp);
  cost.time_s = collective_time_s(Collective::kSendRecv, cost.bytes, 2, pp_link(c, plan));
  if (!plan.sequence_parallel) cost.time_s += collective_time_s(Collective::kAllGather, tensor, plan.tp, tp_link(c, plan));
  return cost;
}

Estimate estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  return estimate_step(m, c, plan, layer_timing(m, c, plan), edge_timing(m, c, plan));
}

Estimate estimate_step(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, const LayerTiming& lt,
                       const EdgeTiming& et) {
  Estimate e;
  const int64_t mbs = plan.micro_batches(), p = plan.pp, v = plan.virtual_stages;
  const double layers = d(m.layers / p);
  const double overhead = plan.execution.microbatch_overhead_us * 1e-6;

  // Pipeline send/recv: the boundary activation (or its gradient), once per chunk per micro-batch.
  const P2pCost p2p = pipeline_transfer(m, c, plan);
  const double p2p_s = p > 1 && !plan.execution.overlap_p2p ? d(v) * p2p.time_s : 0;

  StageTimes mid{layers * lt.forward_s + p2p_s + overhead, layers * lt.backward_input_s + p2p_s,
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
  e.stage_forward_s = slowest.f;
  e.stage_backward_s = slowest.b + slowest.w;
  e.tp_exposed_s = d(mbs) * layers * lt.tp_comm_s;

  // Data parallel and ZeRO on the stage with the most parameters.
  const double params = std::max(stage_params_per_gpu(m, plan, 0), stage_params_per_gpu(m, plan, p - 1));
  const ModelStateBytesPerParam bpp = bytes_per_param(plan);
  const double grads = params * bpp.gradients, weights = params * bpp.weights;
  const LinkTier dpl = dp_link(c, plan);
  const int64_t n = plan.dp;
  auto time = [&](Collective op, double bytes) { return collective_time_s(op, bytes, n, dpl); };
  auto sent = [&](Collective op, double bytes) { return collective_bytes_per_rank(op, bytes, n); };
  const double window = slowest.b + slowest.w;
  const double fm = d(mbs);
  switch (plan.zero) {
    case 0:
      e.dp_exposed_s = exposed_reduction(time(Collective::kAllReduce, grads), window, grads, plan);
      e.comm_bytes_per_gpu.dp = sent(Collective::kAllReduce, grads);
      break;
    case 1:  // reduce-scatter gradients once, all-gather updated weights after the step
      e.dp_exposed_s = exposed_reduction(time(Collective::kReduceScatter, grads), window, grads, plan) +
                       time(Collective::kAllGather, weights);
      e.comm_bytes_per_gpu.dp = sent(Collective::kReduceScatter, grads) + sent(Collective::kAllGather, weights);
      break;
    case 2:  // gradients are sharded, so every micro-batch's are reduce-scattered
      e.dp_exposed_s = fm * exposed_reduction(time(Collective::kReduceScatter, grads), window, grads, plan) +
                       time(Collective::kAllGather, weights);
      e.comm_bytes_per_gpu.dp = fm * sent(Collective::kReduceScatter, grads) + sent(Collective::kAllGather, weights);
      break;
    default: {  // 3: gather weights for forward and for backward, prefetched while the previous op runs
      const double ag = time(Collective::kAllGather, weights);
      e.dp_exposed_s = fm * (std::max(0.0, ag - slowest.f) + std::max(0.0, ag - window) +
                             exposed_reduction(time(Collective::kReduceScatter, grads), window, grads, plan));
      e.comm_bytes_per_gpu.dp = fm * (2 * sent(Collective::kAllGather, weights) + sent(Collective::kReduceScatter, grads));
    }
  }

  e.optimizer_s = optimizer_step_s(c, plan, params);
  e.overhead_s = plan.execution.step_overhead_us * 1e-6;
  e.step_time_s = e.pipeline_s + e.dp_exposed_s + e.optimizer_s + e.overhead_s;

  e.comm_bytes_per_gpu.tp = fm * layers * lt.tp_bytes;
  e.comm_bytes_per_gpu.pp = p > 1 ? 2 * fm * d(v) * p2p.bytes : 0;
  e.memory = peak_memory(m, plan, c.gpu.reserved_gib * 1073741824.0);
  finish_estimate(m, c, plan, e);
  return e;
}

void finish_estimate(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, Estimate& e) {
  e.tier_bytes_per_gpu = bytes_by_tier(c, plan, e.comm_bytes_per_gpu);
  e.model_flops = model_flops_per_step(m, plan.seq_len, plan.global_batch);
  e.hardware_flops = hardware_flops_per_step(m, plan.seq_len, plan.global_batch, plan.recompute);
  const double gpus = d(plan.gpus());
  e.tokens_per_s = d(plan.global_batch) * d(plan.seq_len) / e.step_time_s;
  e.model_tflops_per_gpu = e.model_flops / e.step_time_s / gpus / 1e12;
  e.hardware_tflops_per_gpu = e.hardware_flops / e.step_time_s / gpus / 1e12;
  e.mfu = e.model_tflops_per_gpu * 1e12 / c.gpu.peak_flops(plan.precision);
  e.peak_memory_bytes = e.memory.total();
  e.fits_in_memory = e.peak_memory_bytes <= c.gpu.hbm_bytes();
  e.fits_in_host_memory = e.memory.host * d(c.node.gpus) <= c.host.memory_gib * 1073741824.0;
}

}  // namespace parallax
