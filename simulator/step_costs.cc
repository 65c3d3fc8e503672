#include "simulator/step_costs.h"

#include <algorithm>
#include <string_view>

#include "program/model_state.h"
#include "simulator/collective_cost.h"
#include "simulator/compute_cost.h"

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
constexpr double kBackwardElementwise = 1.5;

struct GemmTimes {
  double fwd_s = 0, dgrad_s = 0, wgrad_s = 0;  // the weight GEMMs
  double core_s = 0, core_bwd_s = 0;            // the attention core
  double ops_recompute_s = 0;  // the forward GEMMs the op-level selective policy re-runs
};

// The share of a forward GEMM's time the op-level policy re-runs (ops_recomputed_matmul_weights):
// the K columns of the fused QKV, all of O, and the up half of a gated FC1.
double ops_recomputed_share(const ModelSpec& m, std::string_view gemm) {
  if (gemm == "qkv") return static_cast<double>(m.kv_dim()) / static_cast<double>(m.q_dim() + 2 * m.kv_dim());
  if (gemm == "proj") return 1.0;
  if (gemm == "fc1") return m.gated_mlp() ? 0.5 : 0.0;
  return 0.0;
}

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
      t.ops_recompute_s += ops_recomputed_share(m, g.name) * fwd;
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
    const AttentionTimes at = attention_times(c.gpu, prec, plan.execution.attention_impl, m.head_dim, plan.seq_len,
                                              0.5 * core_flops);
    t.core_s = at.forward_s;
    t.core_bwd_s = at.backward_s;
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
    const double bytes = layer_elementwise_bytes_per_token(m, plan.seq_len, plan.tp, plan.sequence_parallel, kernel,
                                                           plan.execution.kernels);
    return memory_time_s(gpu, bytes * tokens * activation_element_bytes(prec) / 2.0);
  };
  const double elementwise_s = elementwise_time(plan.execution.attention);
  // The softmax and dropout over materialized scores: what selective recompute re-runs besides
  // the two attention GEMMs.
  const double scores_s = flash ? 0.0 : elementwise_s - elementwise_time(AttentionKernel::kFlash);
  const double core_s = gt.core_s;

  // Two all-reduces forward and two backward (with SP: all-gather + reduce-scatter pairs that
  // move the same bytes in the same time).
  const double tp_msg = boundary_tensor_bytes(m, plan);
  const LinkTier link = group_link(c, plan, GroupKind::kTp);
  const double one_ar_s = collective_time_s(Collective::kAllReduce, tp_msg, plan.tp, link);

  LayerTiming t;
  t.forward_s = gt.fwd_s + core_s + elementwise_s + 2 * one_ar_s;
  // Elementwise backward kernels read the saved input and the incoming gradient and write one
  // gradient where the forward read one tensor and wrote one (norms, GELU/SwiGLU, softmax):
  // 3 passes for 2, so 1.5 x the forward's bytes (dropout's backward moves as many as its forward).
  t.backward_input_s = gt.dgrad_s + gt.core_bwd_s + kBackwardElementwise * elementwise_s + 2 * one_ar_s;
  t.backward_weight_s = gt.wgrad_s;
  t.tp_comm_s = 4 * one_ar_s;
  t.tp_forward_s = t.tp_backward_input_s = 2 * one_ar_s;
  if (plan.recompute == Recompute::kFull) {
    t.backward_input_s += t.forward_s;
    t.tp_comm_s += 2 * one_ar_s;
    t.tp_backward_input_s += 2 * one_ar_s;
  } else if (plan.recompute == Recompute::kSelective && plan.execution.selective == SelectiveRecompute::kOps) {
    // Every elementwise op, the K, O and up GEMMs, and the forward's TP collectives but the saved
    // reduce-scatters (with SP: the two all-gathers; without: the two all-reduces) re-run.
    const double fwd_tp_s = plan.sequence_parallel ? 2 * collective_time_s(Collective::kAllGather, tp_msg, plan.tp, link)
                                                   : 2 * one_ar_s;
    t.backward_input_s += elementwise_s + gt.ops_recompute_s + fwd_tp_s;
    t.tp_comm_s += fwd_tp_s;
    t.tp_backward_input_s += fwd_tp_s;
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
  }
  // Bytes as the step program counts them (one rule for the simulation, the estimate and traces).
  for (OpKind pass : {OpKind::kForward, OpKind::kBackward, OpKind::kWeight}) t.tp_bytes += tp_traffic(m, plan, pass).sent_bytes;
  return t;
}

EdgeTiming edge_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const GpuSpec& gpu = c.gpu;
  const double tokens = d(plan.seq_len) * d(plan.micro_batch);
  const double rep = plan.sequence_parallel ? d(plan.tp) : 1.0;
  const double ab = activation_element_bytes(plan.precision);
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

double optimizer_step_s(const ClusterSpec& c, const Plan& plan, double stage_params) {
  const double local = stage_params / (plan.zero >= 1 ? d(plan.shard_degree()) : 1.0);
  const ModelStateBytesPerParam bpp = bytes_per_param(plan);
  // fp32 has no master copy to cast from: norm (g), Adam (g + 12 read, 12 written), zero (g).
  // Mixed precision adds the cast to 16-bit weights: read 4 write 2 (bf16 states: a copy, 2 + 2),
  // and Adam reads and writes K = bpp.optimizer bytes: 4g + 2K + 6 (bf16 states: 4g + 2K + 4).
  const double cast = plan.execution.bf16_optimizer_states ? 4 : 6;
  const double bytes_per_param = plan.precision == Precision::kFp32 ? 3 * bpp.gradients + 24
                                                                    : 4 * bpp.gradients + 2 * bpp.optimizer + cast;
  if (!plan.offload) return local * bytes_per_param / (c.gpu.hbm_gbps * 1e9 * c.gpu.optimizer_efficiency);
  const double host_bw = c.host.memory_gbps * 1e9 / d(c.node.gpus);
  return local * bytes_per_param / host_bw + local * (bpp.gradients + bpp.weights) / (c.host.pcie_gbps * 1e9);
}

P2pCost pipeline_transfer(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const double tensor = boundary_tensor_bytes(m, plan);
  P2pCost cost;
  cost.bytes = tensor / d(plan.tp);  // as StepProgram::boundary_bytes
  cost.time_s = collective_time_s(Collective::kSendRecv, cost.bytes, 2, group_link(c, plan, GroupKind::kPp));
  if (!plan.sequence_parallel) cost.time_s += collective_time_s(Collective::kAllGather, tensor, plan.tp, group_link(c, plan, GroupKind::kTp));
  return cost;
}

LinkTier group_link(const ClusterSpec& c, const Plan& plan, GroupKind kind) {
  const RankGrid grid(plan);
  return group_link(c, place_group(grid.group_size(kind), grid.stride(kind), c.node.gpus));
}

OpCosts::OpCosts(const ModelSpec& m, const ClusterSpec& c, const Plan& plan)
    : m_(m), c_(c), p_(plan), layer_(layer_timing(m, c, plan)), edge_(edge_timing(m, c, plan)),
      p2p_(pipeline_transfer(m, c, plan)) {
  for (int64_t s = 0; s < plan.pp; ++s) layers_.push_back(d(plan.chunk_layers(m.layers, s).count));
  const RankGrid grid(plan);
  for (GroupKind k : {GroupKind::kTp, GroupKind::kDp, GroupKind::kPp, GroupKind::kEmbedding, GroupKind::kDpReplica}) {
    group_size_[static_cast<int>(k)] = grid.group_size(k);
    link_[static_cast<int>(k)] = group_link(c, plan, k);
  }
}

double OpCosts::compute_s(const ProgramOp& op, int64_t stage) const {
  const int64_t vs = virtual_stage(stage, op.chunk, p_.pp);
  const double layers = layers_[stage];
  const bool first = vs == 0, last = vs == p_.pp * p_.virtual_stages - 1, split = splits_weight_gradients(p_.schedule);
  switch (op.pass) {
    case OpKind::kForward:
      return layers * layer_.forward_s + (first ? edge_.first_forward_s : 0) + (last ? edge_.last_forward_s : 0) +
             p_.execution.microbatch_overhead_us * 1e-6;
    case OpKind::kBackward:
      return layers * (layer_.backward_input_s + (split ? 0 : layer_.backward_weight_s)) +
             (first ? edge_.first_backward_s : 0) +
             (last ? edge_.last_backward_input_s + (split ? 0 : edge_.last_backward_weight_s) : 0);
    case OpKind::kWeight: return layers * layer_.backward_weight_s + (last ? edge_.last_backward_weight_s : 0);
  }
  return 0;
}

double OpCosts::tp_s(const ProgramOp& op, int64_t stage) const {
  if (op.type != ProgramOpType::kCompute) return 0;
  const double layers = layers_[stage];
  const bool split = splits_weight_gradients(p_.schedule);
  switch (op.pass) {
    case OpKind::kForward: return layers * layer_.tp_forward_s;
    case OpKind::kBackward: return layers * (layer_.tp_backward_input_s + (split ? 0 : layer_.tp_backward_weight_s));
    case OpKind::kWeight: return layers * layer_.tp_backward_weight_s;
  }
  return 0;
}

double OpCosts::sm_share(const ProgramOp& op) const {
  if (op.type != ProgramOpType::kCollective || c_.gpu.sm_count <= 0) return 0;
  const int g = static_cast<int>(op.group);
  if (group_size_[g] <= 1) return 0;
  return std::min(1.0, d(link_[g].sms) / d(c_.gpu.sm_count));
}

double OpCosts::duration_s(const ProgramOp& op, int64_t stage) const {
  switch (op.type) {
    case ProgramOpType::kCompute: return compute_s(op, stage);
    case ProgramOpType::kSend:
    case ProgramOpType::kRecv: return p2p_.time_s;
    case ProgramOpType::kOptimizer:
      return optimizer_step_s(c_, p_, stage_params_per_gpu(m_, p_, stage)) + p_.execution.step_overhead_us * 1e-6;
    case ProgramOpType::kCollective: break;
  }
  const int g = static_cast<int>(op.group);
  double t = collective_time_s(op.collective, op.bytes, group_size_[g], link_[g]);
  // Offloaded ZeRO-3 weights come from host memory before each pass and gradient shards go back
  // after each backward (DeepSpeed's offload_param / offload_optimizer): this rank's shard over
  // PCIe, in line with the collective.
  if (p_.offload && (op.role == CollectiveRole::kWeightGather || op.role == CollectiveRole::kGradientShard))
    t += op.bytes / d(p_.shard_degree()) / (c_.host.pcie_gbps * 1e9);
  return t;
}

}  // namespace parallax
