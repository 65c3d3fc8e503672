#include "simulator/step_costs.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string_view>
#include <vector>

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
  double up_proj_s = 0;        // MLA's up-projections (q from its latent, kv_up): mla_up_proj's
  double fp8_forward_bytes = 0, fp8_backward_bytes = 0;  // FP8's casts of GEMM operands
};

// The share of a forward GEMM's time the op-level policy re-runs (ops_recomputed_matmul_weights):
// the K columns of the fused QKV, all of O, and the up half of a gated FC1.
double ops_recomputed_share(const ModelSpec& m, std::string_view gemm) {
  if (gemm == "qkv") return static_cast<double>(m.kv_dim()) / static_cast<double>(m.q_dim() + 2 * m.kv_dim());
  if (gemm == "proj") return 1.0;
  if (gemm == "fc1") return m.gated_mlp() ? 0.5 : 0.0;
  return 0.0;
}

bool is_core(std::string_view gemm) { return gemm == "scores" || gemm == "attn_v"; }

// Forward, input-gradient and weight-gradient GEMMs each have their own shape (and so their own
// wave quantization); the attention core's two backward products are both input gradients. With
// FP8 the weight GEMMs run at the FP8 peak, the router and the attention core in bf16, and each
// FP8 GEMM's input (forward) and output gradient (backward) pass through Transformer Engine's
// fused cast-transpose: read in 16 bits, written as FP8 and FP8 transposed, 2 + 1 + 1 bytes per
// element; current scaling reads the tensor once more for its amax first (+2). Rowwise scales run
// along each GEMM's reduction axis, so no cast serves two GEMMs by a transpose: an input is
// quantized by rows for the forward and by columns for the weight gradient, an output gradient by
// rows for the input gradient and by columns for the weight gradient, each pass an amax read, a
// read and an FP8 write (2 x (2 + 2 + 1) = 10 bytes per element); rowwise GEMMs run at the GPU's
// fp8_rowwise_gemm_fraction of tensorwise ones. Block scaling (blockwise, mxfp8) quantizes along
// both axes in one kernel, each block's amax found in registers: a read and two FP8 writes with
// their scales (one 4-byte scale per 128 elements, or one byte per 32: 1/32 byte an element
// either way), 2 + 2 x (1 + 1/32) = 4.0625 bytes per element. Its GEMMs run at tensorwise rates:
// DeepGEMM's 1 x 128 / 128 x 128 kernels on H800 reach the tensorwise curve within a geomean of
// 0.1% over its six published M = 4,096 shapes; Blackwell scales blocks in the tensor core.
double fp8_cast_bytes(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kDelayed: return 4.0;
    case Fp8Recipe::kCurrent: return 6.0;
    case Fp8Recipe::kRowwise: return 10.0;
    case Fp8Recipe::kBlockwise:
    case Fp8Recipe::kMxfp8: return 2.0 + 2.0 * (1.0 + 1.0 / 32.0);
  }
  return 0.0;
}

GemmTimes gemm_times(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const Precision base = base_precision(plan.precision);
  const Fp8Recipe recipe = plan.execution.fp8_recipe;
  const double cast = plan.precision != Precision::kFp8 ? 0.0 : fp8_cast_bytes(recipe);
  GemmTimes t;
  const bool flash = plan.execution.attention == AttentionKernel::kFlash;
  // Dropping tokens at a capacity pads every expert to it (Megatron's capacity factor as the
  // published recipes pair it with --moe-pad-expert-input-to-capacity); dropless rows are ragged.
  const bool ragged = m.is_moe() && plan.execution.moe_capacity_factor <= 0;
  const double spread = ragged ? (busiest_expert(m, plan) - 1) / expected_max_of_normals(m.experts) : 0.0;
  const GemmShape shape{plan.seq_len, plan.micro_batch, plan.tp,  plan.cp, plan.ep, expert_load(m, plan),
                        plan.expert_tp(), ragged,      spread};
  for (const Gemm& g : layer_gemms(m, shape)) {
    const bool core = is_core(g.name);
    const Precision prec = core || std::string_view(g.name) == "router" ? base : plan.precision;
    // The routed experts' GEMMs run grouped: bound by streaming every local expert's weights at few
    // tokens per expert (grouped_gemm_time_s), then at the calibrated share of that rate.
    const std::string_view name(g.name);
    const bool experts = m.is_moe() && (name == "fc1" || name == "fc2");
    const double share = (experts ? c.gpu.grouped_gemm_fraction : 1.0) *
                         (prec == Precision::kFp8 && recipe == Fp8Recipe::kRowwise ? c.gpu.fp8_rowwise_gemm_fraction : 1.0);
    auto time = [&](const Gemm& x) { return (experts ? grouped_gemm_time_s(c.gpu, prec, x) : gemm_time_s(c.gpu, prec, x)) / share; };
    const double fwd = time(g), dx = time(input_gradient_gemm(g)), dw = time(weight_gradient_gemm(g));
    if (!core) {
      if (prec == Precision::kFp8) {
        t.fp8_forward_bytes += cast * d(g.m) * d(g.k) * d(g.batch);
        t.fp8_backward_bytes += cast * d(g.m) * d(g.n) * d(g.batch);
      }
      t.ops_recompute_s += ops_recomputed_share(m, g.name) * fwd;
      if (name == "kv_up" || (name == "q" && m.q_lora_rank > 0)) t.up_proj_s += fwd;
      t.fwd_s += fwd;
      t.dgrad_s += dx;
      t.wgrad_s += dw;
    } else if (!flash) {
      t.core_s += fwd;
      t.core_bwd_s += dx + dw;
    }
  }
  if (flash) {
    // A fused causal kernel skips the masked half of the s x s square. With CP each rank computes
    // 1/cp of it (the causal load balancing), in blocks of its s / cp rows.
    const double tokens = d(plan.seq_len / plan.cp) * d(plan.micro_batch);
    const double core_flops = attention_core_flops_per_token(m, plan.seq_len) * tokens / d(plan.tp);
    // No framework's kernel named: Parallax's own runtime, whose curve `calibrate --device cuda`
    // writes as "parallax".
    const std::string& impl = plan.execution.attention_impl;
    const AttentionTimes at = attention_times(c.gpu, base, impl.empty() ? std::string("parallax") : impl, m.head_dim,
                                              plan.seq_len / plan.cp, 0.5 * core_flops);
    t.core_s = at.forward_s;
    t.core_bwd_s = at.backward_s;
  }
  return t;
}

// One point-to-point step of a ring (CP's KV exchange): every rank sends to its neighbour at once;
// a ring across nodes waits for the steps that cross them, each on one GPU's NIC.
double ring_step_s(double bytes, const LinkTier& link) {
  if (bytes <= 0) return 0;
  const double bw = link.crosses_nodes ? link.busbw_Bps / d(link.ranks_per_node) : link.busbw_Bps;
  return link.latency_s + bytes / bw;
}

// Context and expert parallelism's communication inside one layer: {forward, backward} seconds
// and the bytes this GPU sends for both.
struct LayerExchange {
  double cp_forward_s = 0, cp_backward_s = 0, ep_forward_s = 0, ep_backward_s = 0;
  double cp_bytes = 0, ep_bytes = 0;
};

LayerExchange layer_exchange(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, const GemmTimes& gt) {
  LayerExchange x;
  const double ab = activation_element_bytes(plan.precision);
  const double tokens = d(plan.seq_len / plan.cp) * d(plan.micro_batch);
  if (plan.cp > 1) {
    const LinkTier link = group_link(c, plan, GroupKind::kCp);
    if (plan.execution.cp_comm == CpComm::kP2p) {
      // Ring attention: cp - 1 steps pass this rank's K and V block on, each under the attention
      // of one block (1/cp of the core); the backward passes K, V and their gradients, twice the bytes.
      const double kv = tokens * d(m.kv_dim() + m.v_dim()) / d(plan.tp) * ab;
      const double steps = d(plan.cp - 1);
      x.cp_forward_s = steps * std::max(0.0, ring_step_s(kv, link) - gt.core_s / d(plan.cp));
      x.cp_backward_s = steps * std::max(0.0, ring_step_s(2 * kv, link) - gt.core_bwd_s / d(plan.cp));
      x.cp_bytes = steps * 3 * kv;
    } else if (plan.execution.cp_comm == CpComm::kAllGather) {
      // K and V all-gathered before the attention, their gradients reduce-scattered after: not hidden.
      const double kv = tokens * d(m.kv_dim() + m.v_dim()) / d(plan.tp) * ab * d(plan.cp);  // the full buffer
      x.cp_forward_s = collective_time_s(Collective::kAllGather, kv, plan.cp, link);
      x.cp_backward_s = collective_time_s(Collective::kReduceScatter, kv, plan.cp, link);
      x.cp_bytes = 2 * collective_bytes_per_rank(Collective::kAllGather, kv, plan.cp);
    } else {
      // Ulysses: all-to-alls of Q, K, V before the attention and of its output after, exchanging
      // the sequence split for a head split; the backward the same for the gradients. Not hidden.
      const double qkvo = tokens * d(m.q_dim() + m.kv_dim() + m.v_dim() + m.o_dim()) / d(plan.tp) * ab;
      x.cp_forward_s = collective_time_s(Collective::kAllToAll, qkvo, plan.cp, link);
      x.cp_backward_s = x.cp_forward_s;
      x.cp_bytes = 2 * collective_bytes_per_rank(Collective::kAllToAll, qkvo, plan.cp);
    }
  }
  if (plan.ep > 1 && m.is_moe()) {
    // Token dispatch and combine: this rank's routed copies (its s / cp / t tokens under SP, x top-k)
    // all-to-all over EP, forward and again for the gradients backward. The exchange ends when the
    // busiest rank has received (dispatch) and returned (combine) its expert_load x the mean.
    const double rep = plan.sequence_parallel ? d(plan.tp) : 1.0, load = expert_load(m, plan);
    const double local = tokens / rep, routed = local * d(m.experts_per_token) * d(m.hidden) * ab;
    const LinkTier link = group_link(c, plan, GroupKind::kEp);
    double one = collective_time_s(Collective::kAllToAll, load * routed, plan.ep, link);
    double sent = collective_bytes_per_rank(Collective::kAllToAll, routed, plan.ep);
    if (plan.execution.moe_dispatcher == MoeDispatcher::kDeepEp && link.crosses_nodes) {
      // One copy per remote node over this GPU's NIC; there NVLink forwards the copies to the
      // experts' GPUs, as much as an all-to-all inside the node moves.
      const double rpn = d(link.ranks_per_node);
      const double rdma = local * remote_nodes_per_token(m, link.nodes) * d(m.hidden) * ab;
      const double forwarded = routed * (rpn - 1) / rpn;
      one = link.latency_s + load * std::max(rdma / (link.busbw_Bps / rpn), forwarded / link.intra_busbw_Bps);
      sent = rdma + forwarded;
    }
    x.ep_forward_s = x.ep_backward_s = 2 * one;
    x.ep_bytes = 4 * sent;
  }
  return x;
}

// What recompute re-runs in a layer's backward, from the forward's parts.
struct ForwardParts {
  double elementwise_s;    // every memory-bound kernel (FP8 casts included)
  double ops_gemm_s;       // the GEMMs the op-level policy re-runs (K, O, up)
  double core_s;           // the attention core with its softmax and dropout (Megatron's selective)
  double tp_s;             // the forward's TP collectives
  double tp_gathers_s;     // those the op-level policy re-runs: with SP the all-gathers, else all
  double norm_s;           // the norms (Megatron's layernorm module)
  double moe_act_s;        // the routed experts' activation function (moe_act)
  double up_proj_s;        // MLA's up-projections (mla_up_proj)
};

void add_recompute(LayerTiming& t, const Plan& plan, const ForwardParts& f) {
  if (plan.recompute == Recompute::kFull) {
    // Per layer, averaged over the layers: a share r of them re-runs its forward.
    const double r = plan.execution.recompute_fraction;
    t.backward_input_s += r * t.forward_s;
    t.tp_comm_s += r * f.tp_s;
    t.tp_backward_input_s += r * f.tp_s;
    t.exchange_backward_s += r * t.exchange_forward_s;
    t.ep_backward_s += r * t.ep_forward_s;
    // The forward's share of the bytes runs again: CP p2p 1 of 3 (K, V; then K, V, dK, dV), the
    // others and EP 1 of 2.
    t.cp_bytes *= 1.0 + r * (plan.execution.cp_comm == CpComm::kP2p ? 1.0 / 3.0 : 0.5);
    t.ep_bytes *= 1.0 + 0.5 * r;
  } else if (plan.recompute == Recompute::kSelective && plan.execution.selective == SelectiveRecompute::kOps) {
    // Every elementwise op, the K, O and up GEMMs, and the forward's TP collectives but the saved
    // reduce-scatters re-run.
    t.backward_input_s += f.elementwise_s + f.ops_gemm_s + f.tp_gathers_s;
    t.tp_comm_s += f.tp_gathers_s;
    t.tp_backward_input_s += f.tp_gathers_s;
  } else if (plan.recompute == Recompute::kSelective) {
    const unsigned modules = plan.execution.recompute_modules;
    t.backward_input_s += ((modules & kCoreAttn) ? f.core_s : 0.0) + ((modules & kLayernorm) ? f.norm_s : 0.0) +
                          ((modules & kMoeAct) ? f.moe_act_s : 0.0) + ((modules & kMlaUpProj) ? f.up_proj_s : 0.0);
  }
}

// FSDP2's copies between a unit's parameters and gradients and its collectives' flat buffers:
// this rank's layer parameters, read and written once per copy.
void add_fsdp2_copies(LayerTiming& t, const GpuSpec& gpu, const ModelSpec& m, const Plan& plan) {
  const bool copy_out = plan.zero == 3 && plan.execution.gather_copy_out;
  const bool copy_in = plan.zero >= 2 && plan.shard_degree() > 1 && plan.execution.reduce_copy_in;
  if (!copy_out && !copy_in) return;
  const double local = layer_params_per_gpu(m, plan);
  if (copy_out) {
    // The gathered unit into its parameters before the forward and again before the backward, at
    // the gathered width.
    const double copy_s = memory_time_s(gpu, 2 * bytes_per_param(plan).gathered * local);
    t.forward_s += copy_s;
    t.backward_input_s += copy_s;
  }
  if (copy_in) {
    // The unit's gradients, as the backward computed them (the parameters' width), into the
    // reduce-scatter's input at the reduction's width, once the unit's backward is done.
    const double computed = activation_element_bytes(base_precision(plan.precision));
    t.backward_weight_s += memory_time_s(gpu, (computed + bytes_per_param(plan).gradients) * local);
  }
}

}  // namespace

double remote_nodes_per_token(const ModelSpec& m, int64_t nodes) {
  if (nodes <= 1) return 0;
  const ModelSpec::Recipe& r = m.recipe;
  if (r.router_groups == nodes && r.router_group_topk > 0)
    return d(std::min(r.router_group_topk, nodes)) * d(nodes - 1) / d(nodes);
  const double e = d(m.experts), per_node = e / d(nodes);
  double none = 1;  // P0
  for (int64_t i = 0; i < m.experts_per_token; ++i) none *= std::max(0.0, e - per_node - d(i)) / (e - d(i));
  return d(nodes - 1) * (1 - none);
}

LayerTiming exchange_overlapped(const LayerTiming& t, bool split_weights, double exposed) {
  LayerTiming o = t;
  const double backward = t.backward_input_s + (split_weights ? 0.0 : t.backward_weight_s), hides = 1 - exposed;
  o.forward_s -= hides * std::min(t.ep_forward_s, std::max(0.0, backward - t.ep_backward_s));
  o.backward_input_s -= hides * std::min(t.ep_backward_s, std::max(0.0, t.forward_s - t.ep_forward_s));
  return o;
}

double expected_max_of_normals(int64_t n) {
  // z_n = ∫ x n φ(x) Φ(x)^(n−1) dx by the trapezoid rule on [−9, 9], for every n up to kTable at
  // once (Φ^(n−1) by repeated products at each abscissa), built on first use. The integrand is
  // smooth and vanishes at both ends, where the rule converges geometrically: steps of 1/16 agree
  // with 1/256 to 1e-14.
  constexpr int64_t kTable = 4096;
  static const std::vector<double> table = [] {
    std::vector<double> z(kTable + 1, 0.0);
    constexpr double h = 1.0 / 16;
    for (int i = 0; i <= 18 * 16; ++i) {
      const double x = -9.0 + h * i, p = 0.5 * std::erfc(-x / std::sqrt(2.0));
      const double x_phi = x * std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi);
      double p_power = 1;  // Φ^(k−1)
      for (int64_t k = 1; k <= kTable; ++k, p_power *= p) z[static_cast<size_t>(k)] += h * x_phi * d(k) * p_power;
    }
    return z;
  }();
  if (n <= 1) return 0.0;
  if (n <= kTable) return table[static_cast<size_t>(n)];
  // Beyond the table, Gumbel's limit: a_n + γ / a_n with a_n = √(2 ln n) − (ln ln n + ln 4π) / (2√(2 ln n)).
  const double r = std::sqrt(2 * std::log(d(n)));
  const double a = r - (std::log(std::log(d(n))) + std::log(4 * std::numbers::pi)) / (2 * r);
  return a + 0.5772156649 / a;
}

double busiest_expert(const ModelSpec& m, const Plan& plan) {
  if (!m.is_moe()) return 1.0;
  const double gini = m.is_mla() ? kRoutedLoadGiniLatent : kRoutedLoadGini;
  double busiest = plan.execution.moe_imbalance > 0
                       ? plan.execution.moe_imbalance
                       : 1 + std::sqrt(std::numbers::pi) * gini * expected_max_of_normals(m.experts);
  busiest = std::min(busiest, d(m.experts) / d(m.experts_per_token));  // every token chose this expert
  if (plan.execution.moe_capacity_factor > 0) busiest = std::min(busiest, plan.execution.moe_capacity_factor);
  return std::max(1.0, busiest);
}

double expert_load(const ModelSpec& m, const Plan& plan) {
  if (!m.is_moe() || plan.ep <= 1 || m.experts <= 1) return 1.0;
  const double busiest = busiest_expert(m, plan);
  if (plan.ep >= m.experts) return busiest;
  const double local = d(m.experts / plan.ep);
  return 1 + (busiest - 1) * expected_max_of_normals(plan.ep) / (expected_max_of_normals(m.experts) * std::sqrt(local));
}

LayerTiming layer_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  const GpuSpec& gpu = c.gpu;
  const Precision base = base_precision(plan.precision);
  const bool flash = plan.execution.attention == AttentionKernel::kFlash;
  const double tokens = d(plan.seq_len / plan.cp) * d(plan.micro_batch);

  const GemmTimes gt = gemm_times(m, c, plan);
  auto elementwise_time = [&](AttentionKernel kernel) {
    const double bytes = layer_elementwise_bytes_per_token(m, plan.seq_len, plan.tp, plan.sequence_parallel, kernel,
                                                           plan.execution.kernels);
    return memory_time_s(gpu, bytes * tokens * activation_element_bytes(base) / 2.0);
  };
  const double fp8_fwd_s = memory_time_s(gpu, gt.fp8_forward_bytes), fp8_bwd_s = memory_time_s(gpu, gt.fp8_backward_bytes);
  const double elementwise_s = elementwise_time(plan.execution.attention);
  // The softmax and dropout over materialized scores: what selective recompute re-runs besides
  // the two attention GEMMs.
  const double scores_s = flash ? 0.0 : elementwise_time(plan.execution.attention) - elementwise_time(AttentionKernel::kFlash);
  const double core_s = gt.core_s;
  const LayerExchange x = layer_exchange(m, c, plan, gt);

  // Two all-reduces forward and two backward: one around the attention, one around the MLP — whose
  // buffer holds every routed copy of a token in an MoE layer (top-k x), over the expert TP ranks
  // (etp consecutive ranks, with etp / tp of the tokens). With SP each is an all-gather and a
  // reduce-scatter, two NCCL calls moving the same bytes (fewer where FP8 gathers), as rings: NVLS
  // serves only all-reduce.
  const double tp_msg = boundary_tensor_bytes(m, plan);
  const int64_t mlp_ranks = m.is_moe() ? plan.expert_tp() : plan.tp;
  const double mlp_msg = m.is_moe() ? d(m.experts_per_token) * tp_msg * d(mlp_ranks) / d(plan.tp) : tp_msg;
  LinkTier link = group_link(c, plan, GroupKind::kTp), mlp_link = group_link(c, place_group(mlp_ranks, 1, c.node.gpus));
  // Overlapped with the GEMMs (userbuffers, async TP), the calibrated share stays exposed. Neither
  // goes through NCCL (userbuffers and symmetric memory copy over NVLink themselves): no protocols.
  if (plan.execution.tp_comm_overlap) {
    link.nccl_protocols = mlp_link.nccl_protocols = false;
    link.nvls_algbw_Bps = mlp_link.nvls_algbw_Bps = 0;
  }
  const double exposed = plan.execution.tp_comm_overlap
                             ? c.calibration.value(CalParam::kTpOverlapExposed, framework_family(plan.execution.framework))
                             : 1.0;
  // FP8 gathers move a share of the bytes (sp_gather_share); a gather and a reduce-scatter then
  // take the all-reduce's place.
  const double gathered = sp_gather_share(plan);
  auto pair_s = [&](Collective op, double share) {
    return exposed * (collective_time_s(op, share * tp_msg, plan.tp, link) +
                      collective_time_s(op, share * mlp_msg, mlp_ranks, mlp_link));
  };
  const double ag_pair_s = plan.sequence_parallel ? pair_s(Collective::kAllGather, gathered) : 0.0;  // SP's gathers
  const double ar_pair_s = plan.sequence_parallel ? ag_pair_s + pair_s(Collective::kReduceScatter, 1.0)
                                                  : pair_s(Collective::kAllReduce, 1.0);

  LayerTiming t;
  t.forward_s = gt.fwd_s + core_s + elementwise_s + fp8_fwd_s + ar_pair_s + x.cp_forward_s + x.ep_forward_s;
  // Elementwise backward kernels read the saved input and the incoming gradient and write one
  // gradient where the forward read one tensor and wrote one (norms, GELU/SwiGLU, softmax):
  // 3 passes for 2, so 1.5 x the forward's bytes (dropout's backward moves as many as its forward).
  t.backward_input_s = gt.dgrad_s + gt.core_bwd_s + kBackwardElementwise * elementwise_s + fp8_bwd_s + ar_pair_s +
                       x.cp_backward_s + x.ep_backward_s;
  t.backward_weight_s = gt.wgrad_s;
  t.tp_comm_s = 2 * ar_pair_s;
  t.tp_forward_s = t.tp_backward_input_s = ar_pair_s;
  t.exchange_forward_s = x.cp_forward_s + x.ep_forward_s;
  t.exchange_backward_s = x.cp_backward_s + x.ep_backward_s;
  t.ep_forward_s = x.ep_forward_s;
  t.ep_backward_s = x.ep_backward_s;
  t.cp_bytes = x.cp_bytes;
  t.ep_bytes = x.ep_bytes;
  // Megatron's modules: the fused norms (read 2h, write 2h each, over the tokens SP leaves a rank)
  // and the routed experts' activation (SwiGLU: read 4f, write 2f; else 2f, 2f per routed copy).
  // Priced only for plans that re-run them: the search prices every plan's layer.
  const unsigned modules = plan.recompute == Recompute::kSelective ? plan.execution.recompute_modules : 0u;
  const double rep = plan.sequence_parallel ? d(plan.tp) : 1.0, ab = activation_element_bytes(base);
  const double norm_s = (modules & kLayernorm) ? memory_time_s(gpu, d(m.norms_per_layer) * 2 * d(m.hidden) * ab * tokens / rep) : 0.0;
  const double moe_act_s = (modules & kMoeAct) && m.is_moe()
                               ? memory_time_s(gpu, d(m.experts_per_token) * d(m.ffn_hidden) * (m.gated_mlp() ? 3 : 2) * ab * tokens / d(plan.tp))
                               : 0.0;
  add_recompute(t, plan, {elementwise_s + fp8_fwd_s, gt.ops_recompute_s, core_s + scores_s, ar_pair_s,
                          plan.sequence_parallel ? ag_pair_s : ar_pair_s, norm_s, moe_act_s, gt.up_proj_s});
  add_fsdp2_copies(t, gpu, m, plan);
  if (plan.sequence_parallel && plan.tp > 1) {
    // SP stores only the sharded inputs of the two column-parallel GEMMs (QKV, FC1), so their
    // weight gradients need the inputs all-gathered again. Megatron issues these asynchronously
    // beside the dgrad GEMM, but Korthikanti et al. Table 4 shows SP's backward no faster than
    // without SP, i.e. the gathers are not hidden: priced as exposed.
    t.backward_weight_s += ag_pair_s;
    t.tp_backward_weight_s = ag_pair_s;
    t.tp_comm_s += ag_pair_s;
  }
  // Bytes as the step program counts them (one rule for the simulation, the estimate and traces).
  for (OpKind pass : {OpKind::kForward, OpKind::kBackward, OpKind::kWeight}) t.tp_bytes += tp_traffic(m, plan, pass).sent_bytes;
  return t;
}

LossBytes loss_bytes_per_logit(LossKernel kernel, double logit_bytes) {
  const double b = logit_bytes;
  // Widening to fp32 (read b, write 4) and narrowing the gradient back (read 4, write b); none
  // when the logits already are fp32.
  const double widen = b == 4 ? 0 : b + 4, narrow = b == 4 ? 0 : 4 + b;
  switch (kernel) {
    case LossKernel::kFused:  // read the logits, write the fp32 softmax (+ its max and sum); read it, write the gradient
      return {b + 8, 4 + b};
    case LossKernel::kMegatron:
      // megatron/core/tensor_parallel/cross_entropy.py: .float(), max (r4), -= max (r4 w4), exp
      // out= (r4 w4), sum (r4), div_ by the sum (r4 w4); backward mul_ by the loss gradient
      // (r4 w4), then .float()'s backward narrows it.
      return {widen + 32, 8 + narrow};
    case LossKernel::kMegatronFused:
      // megatron/core/fusions/fused_cross_entropy.py: the same ops in three jit-fused kernels,
      // .float() with max, -= max with exp and sum (r4 w4), div_ (r4 w4); backward reads the
      // softmax and writes the narrowed gradient in one.
      return {(b == 4 ? 4 : b + 4) + 16, 4 + b};
    case LossKernel::kEager:
      // F.cross_entropy at the logits' width: log_softmax reads a row for its max, again for the
      // sum of exponentials, and once more to write it (3b + b); backward nll_loss zero-fills its
      // gradient (b), log_softmax's backward sums it (b) and writes grad - exp(out) x sum (3b).
      return {4 * b, 5 * b};
    case LossKernel::kEagerFp32:  // the same at 4 bytes, after logits.float(); the gradient narrowed back
      return {widen + 16, 20 + narrow};
  }
  return {};
}

EdgeTiming edge_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, const LayerTiming& layer) {
  const GpuSpec& gpu = c.gpu;
  const Precision base = base_precision(plan.precision);  // the output layer stays in bf16 under FP8
  const double tokens = d(plan.seq_len / plan.cp) * d(plan.micro_batch);
  const double rep = plan.sequence_parallel ? d(plan.tp) : 1.0;
  const double ab = activation_element_bytes(plan.precision);
  EdgeTiming e;
  // Embedding: gather rows (read + write h per token); backward scatters them into the gradient.
  e.first_forward_s = memory_time_s(gpu, 2 * tokens * d(m.hidden) * ab / rep);
  e.first_backward_s = e.first_forward_s;
  if (plan.execution.dense_embedding_grad) {
    // The rank's vocab / t x h table of gradient, zero-filled at the weights' width and read
    // again to be added into the gradient buffer (read and written at its width).
    const double table = d(m.vocab) / d(plan.tp) * d(m.hidden);
    e.first_backward_s += memory_time_s(gpu, table * (2 * ab + 2 * bytes_per_param(plan).gradients));
  }
  // Output layer: tokens x (V/t) x h GEMM, then the loss over the vocab-parallel logits.
  const Gemm logits{"logits", static_cast<int64_t>(tokens), m.vocab / plan.tp, m.hidden};
  const double gemm_s = gemm_time_s(gpu, base, logits);
  const double logits_elems = tokens * d(m.vocab) / d(plan.tp);
  const double norm_s = memory_time_s(gpu, 4 * tokens * d(m.hidden) * ab / rep);
  const LossBytes loss = loss_bytes_per_logit(plan.execution.loss, ab);
  const double head_forward_s = gemm_s + norm_s + memory_time_s(gpu, logits_elems * loss.forward);
  const double head_backward_input_s = gemm_s + 2 * norm_s + memory_time_s(gpu, logits_elems * loss.backward);
  e.last_forward_s = head_forward_s;
  e.last_backward_input_s = head_backward_input_s;
  e.last_backward_weight_s = gemm_s;
  if (m.mtp_layers > 0) {
    // Each multi-token-prediction depth: enorm and hnorm, eh_proj (tokens x h/t x 2h), a layer,
    // then the head as above (its final norm included).
    const double depths = d(m.mtp_layers);
    const double eh_s = gemm_time_s(gpu, base, Gemm{"eh_proj", static_cast<int64_t>(tokens), m.hidden / plan.tp, 2 * m.hidden});
    e.last_forward_s += depths * (2 * norm_s + eh_s + layer.forward_s + head_forward_s);
    e.last_backward_input_s += depths * (4 * norm_s + eh_s + layer.backward_input_s + head_backward_input_s);
    e.last_backward_weight_s += depths * (eh_s + layer.backward_weight_s + gemm_s);
  }
  return e;
}

double optimizer_step_s(const ClusterSpec& c, const Plan& plan, const StageParams& stage_params) {
  const double local = plan.zero >= 1 ? stage_params.dense / d(plan.shard_degree()) + stage_params.expert / d(plan.expert_data_ranks())
                                      : stage_params.total();
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
    : m_(m), c_(c), p_(plan), layer_(layer_timing(m, c, plan)), edge_(edge_timing(m, c, plan, layer_)),
      p2p_(pipeline_transfer(m, c, plan)), host_(c.calibration.host_cost(plan.execution.framework)) {
  if (m.has_dense_layers()) dense_layer_ = layer_timing(dense_layer_model(m), c, plan);  // leading or interleaved
  overlapped_layer_ = exchange_overlapped(layer_, splits_weight_gradients(plan.schedule), c.calibration.ep_overlap_exposed);
  for (int64_t s = 0; s < plan.pp; ++s) {
    for (int64_t k = 0; k < plan.virtual_stages; ++k) {
      layers_.push_back(d(plan.chunk_layers(m.layers, s, k).count));
      dense_.push_back(d(chunk_dense_layers(m, plan, s, k)));
    }
  }
  const RankGrid grid(plan);
  for (int k = 0; k < kGroupKinds; ++k) {
    group_size_[k] = grid.group_size(static_cast<GroupKind>(k));
    link_[k] = group_link(c, plan, static_cast<GroupKind>(k));
  }
}

// The sum over a chunk's layers of `field` of their timing: its leading dense layers, the rest.
double OpCosts::over_layers(const ProgramOp& op, int64_t stage, double LayerTiming::*field) const {
  const size_t k = static_cast<size_t>(stage * p_.virtual_stages + op.chunk);
  const LayerTiming& own = op.exchange_overlapped ? overlapped_layer_ : layer_;  // dense layers exchange nothing
  return (layers_[k] - dense_[k]) * own.*field + (dense_[k] > 0 ? dense_[k] * dense_layer_.*field : 0.0);
}

double OpCosts::chunk_fixed_s(const ProgramOp& op, int64_t stage) const {
  const double plan_s = op.pass == OpKind::kForward ? p_.execution.microbatch_overhead_us * 1e-6 / d(p_.virtual_stages) : 0.0;
  return plan_s + host_.chunk_s(layers_[static_cast<size_t>(stage * p_.virtual_stages + op.chunk)], p_.virtual_stages);
}

double OpCosts::compute_s(const ProgramOp& op, int64_t stage) const {
  const int64_t vs = virtual_stage(stage, op.chunk, p_.pp);
  const bool first = vs == 0, last = vs == p_.pp * p_.virtual_stages - 1, split = splits_weight_gradients(p_.schedule);
  switch (op.pass) {
    case OpKind::kForward:
      return over_layers(op, stage, &LayerTiming::forward_s) + (first ? edge_.first_forward_s : 0) +
             (last ? edge_.last_forward_s : 0) + chunk_fixed_s(op, stage);
    case OpKind::kBackward:
      return over_layers(op, stage, &LayerTiming::backward_input_s) +
             (split ? 0 : over_layers(op, stage, &LayerTiming::backward_weight_s)) + (first ? edge_.first_backward_s : 0) +
             (last ? edge_.last_backward_input_s + (split ? 0 : edge_.last_backward_weight_s) : 0) + chunk_fixed_s(op, stage);
    case OpKind::kWeight:
      return over_layers(op, stage, &LayerTiming::backward_weight_s) + (last ? edge_.last_backward_weight_s : 0);
  }
  return 0;
}

double OpCosts::tp_s(const ProgramOp& op, int64_t stage) const {
  if (op.type != ProgramOpType::kCompute) return 0;
  const bool split = splits_weight_gradients(p_.schedule);
  const double w = over_layers(op, stage, &LayerTiming::tp_backward_weight_s);
  switch (op.pass) {
    case OpKind::kForward: return over_layers(op, stage, &LayerTiming::tp_forward_s);
    case OpKind::kBackward: return over_layers(op, stage, &LayerTiming::tp_backward_input_s) + (split ? 0 : w);
    case OpKind::kWeight: return w;
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
      return optimizer_step_s(c_, p_, stage_param_split(m_, p_, stage)) + p_.execution.step_overhead_us * 1e-6;
    case ProgramOpType::kCollective: break;
  }
  const int g = static_cast<int>(op.group);
  // A pass's ZeRO-2/3 collectives (those of one micro-batch, but the SP norms' all-reduce) go one
  // unit (layer) at a time (step_program.h): each unit's message pays the ring's latency, and its
  // size sets how much of it latency is.
  const bool per_unit = op.micro_batch >= 0 && p_.zero >= 2 && op.role != CollectiveRole::kNormGradients;
  const double units = per_unit ? std::max(1.0, layers_[static_cast<size_t>(stage * p_.virtual_stages + op.chunk)]) : 1.0;
  double t = units * collective_time_s(op.collective, op.bytes / units, group_size_[g], link_[g]);
  // Offloaded ZeRO-3 weights come from host memory before each pass and gradient shards go back
  // after each backward (DeepSpeed's offload_param / offload_optimizer): this rank's shard over
  // PCIe, in line with the collective.
  if (p_.offload && (op.role == CollectiveRole::kWeightGather || op.role == CollectiveRole::kGradientShard))
    t += op.bytes / d(p_.shard_degree()) / (c_.host.pcie_gbps * 1e9);
  return t;
}

}  // namespace parallax
