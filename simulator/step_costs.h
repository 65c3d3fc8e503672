// Per-op costs of a plan on a cluster — the one cost module. The analytical estimate
// (planner/estimate.h) and the simulation's lowering (planner/lowering.h) both price their work
// here: a layer's forward, input-gradient and weight-gradient passes (GEMMs by shape, the
// attention kernel, memory-bound kernels, the TP collectives inside), the embedding and output
// layer, a pipeline transfer, the optimizer step, and (OpCosts) every op of a StepProgram.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_spec.h"
#include "program/model_state.h"
#include "program/plan.h"
#include "program/step_program.h"
#include "simulator/cluster_spec.h"
#include "simulator/collective_cost.h"

namespace parallax {

// One layer, one micro-batch, one GPU; TP collectives included.
struct LayerTiming {
  double forward_s = 0;
  double backward_input_s = 0;  // incl. what recompute re-runs
  double backward_weight_s = 0;
  double tp_comm_s = 0;         // the TP collective time inside the three above
  double tp_forward_s = 0, tp_backward_input_s = 0, tp_backward_weight_s = 0;  // its split by pass
  double tp_bytes = 0;          // bytes this GPU sends in TP collectives, forward + backward
  // CP's KV exchange (its part not hidden under the attention, or Ulysses' all-to-alls) and EP's
  // token all-to-alls, inside forward_s and backward_input_s; the bytes this GPU sends for them.
  double exchange_forward_s = 0, exchange_backward_s = 0;
  double ep_forward_s = 0, ep_backward_s = 0;  // EP's part of the two above
  double cp_bytes = 0, ep_bytes = 0;
};
// The layer's timing in a pass that runs beside the opposite pass of another micro-batch
// (execution.moe_a2a_overlap, ProgramOp::exchange_overlapped): the forward's EP all-to-alls hide
// behind the backward's other work and the backward's behind the forward's, each as far as that
// work lasts: forward_s - (1 - exposed) min(ep_f, B - ep_b), backward_input_s - (1 - exposed) min(ep_b, F - ep_f), where B is
// the backward with its weight gradients unless `split_weights` (ZB-H1) moves them to W; of what
// hides, the calibrated share `exposed` (ep_overlap_exposed) stays.
LayerTiming exchange_overlapped(const LayerTiming& t, bool split_weights, double exposed);
// Of an MoE layer; of a leading dense layer: layer_timing(dense_layer_model(m), ...).
LayerTiming layer_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// The busiest EP rank's routed tokens over the mean. Per micro-batch and layer the experts' loads
// scatter about the mean; taken as independent with one spread σ (a share of the mean), the
// busiest of E experts lies z_E σ above it, z_n the expected maximum of n standard normals, so the
// busiest expert m (busiest_expert) gives σ = (m − 1) / z_E. A rank sums its E/ep experts, spread
// σ / √(E/ep), and the busiest of ep ranks is 1 + z_ep σ / √(E/ep) = 1 + (m − 1) z_ep / (z_E √(E/ep)):
// m with an expert per rank, 1 without EP. It sets the grouped GEMMs' rows and the all-to-alls'
// time (the busiest rank receives and returns that many tokens). 1 for a dense model.
double expert_load(const ModelSpec& m, const Plan& plan);
// The busiest expert's tokens over the mean that expert_load spreads: execution.moe_imbalance, or
// for 0 a trained router's on real text, 1 + z_E σ with σ = √π kRoutedLoadGini (the normal spread
// of that Gini); at most E / top-k (every token chose it) and the capacity factor. 1 for a dense model.
double busiest_expert(const ModelSpec& m, const Plan& plan);
// z_n: the expected maximum of n independent standard normals (0 for n <= 1).
double expected_max_of_normals(int64_t n);
// DeepEP's inter-node traffic: the other nodes a token's top-k experts lie on, each sent the token
// once, with the experts spread evenly over `nodes` and routing uniform: (nodes - 1) x (1 - P0),
// P0 = C(E - E/nodes, k) / C(E, k) the chance a node holds none of them. Group-limited routing
// whose groups are the nodes (DeepSeek-V3 on EP 64: 8 groups of 32 experts, 8 nodes) touches
// exactly topk_group nodes, (nodes - 1) / nodes of them remote.
double remote_nodes_per_token(const ModelSpec& m, int64_t nodes);

// HBM bytes the loss moves per logit element (one vocabulary entry of one token), forward and
// backward, when the logits are `logit_bytes` wide (2: bf16/fp16, 4: fp32), by how the framework
// runs it. The output GEMM's own reads and writes are not included.
struct LossBytes {
  double forward = 0, backward = 0;
};
LossBytes loss_bytes_per_logit(LossKernel kernel, double logit_bytes);

// The embedding (first stage) and the output layer with the loss (last stage), one micro-batch.
struct EdgeTiming {
  double first_forward_s = 0, first_backward_s = 0;
  double last_forward_s = 0, last_backward_input_s = 0, last_backward_weight_s = 0;
};
// `layer` is the model's (MoE) layer_timing, which each multi-token-prediction depth runs once more
// on the last stage; callers that have it pass it rather than price it again.
EdgeTiming edge_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan, const LayerTiming& layer);
inline EdgeTiming edge_timing(const ModelSpec& m, const ClusterSpec& c, const Plan& plan) {
  return edge_timing(m, c, plan, m.mtp_layers > 0 ? layer_timing(m, c, plan) : LayerTiming{});
}

// One pipeline transfer: the boundary activation (or its gradient) of one micro-batch. Megatron
// splits it over the TP ranks, each sending 1/t (scatter-gather); without SP the receiver then
// all-gathers it over TP, which is part of the transfer's time.
struct P2pCost {
  double bytes = 0;   // sent by one GPU
  double time_s = 0;  // until the receiver holds the whole tensor
};
P2pCost pipeline_transfer(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);

// Optimizer step of one GPU holding `stage_params` parameters before ZeRO sharding: memory-bound
// passes over the local shard — overflow check and gradient norm (read g each), Adam (read g, read
// and write fp32 master, m, v), cast to 16-bit weights (read 4, write 2), zero the gradients
// (write g): 4g + 30 bytes per parameter, g the gradient bytes (2, or 4 with fp32_gradients; fp32:
// no cast, 3g + 24; bf16 optimizer states: 4g + 16) — at the optimizer efficiency of HBM bandwidth on the GPU, or (offload) on the
// host plus the PCIe copies of gradients down and weights up.
// ZeRO-1 and up shard the dense parameters over shard_degree() and the experts' over the expert
// data-parallel ranks.
double optimizer_step_s(const ClusterSpec& c, const Plan& plan, const StageParams& stage_params);

// Where the groups of `kind` lie on the cluster's nodes (the plan's rank layout) and so which
// link their collectives run at.
LinkTier group_link(const ClusterSpec& c, const Plan& plan, GroupKind kind);

// Durations of a StepProgram's ops on one stage's representative GPU.
class OpCosts {
 public:
  OpCosts(const ModelSpec& m, const ClusterSpec& c, const Plan& plan);
  // Compute ops include their TP collectives and fixed per-micro-batch cost; a send or receive is
  // the transfer; the optimizer includes the fixed per-step cost.
  double duration_s(const ProgramOp& op, int64_t stage) const;
  // The share of the GPU's SMs a DP/ZeRO or embedding collective holds while it runs (its NCCL
  // CTAs), by which it slows the compute beside it; 0 for other ops.
  double sm_share(const ProgramOp& op) const;
  // The TP collective time inside a compute op (part of its duration).
  double tp_s(const ProgramOp& op, int64_t stage) const;
  const LayerTiming& layer() const { return layer_; }
  const EdgeTiming& edge() const { return edge_; }

 private:
  double compute_s(const ProgramOp& op, int64_t stage) const;
  double over_layers(const ProgramOp& op, int64_t stage, double LayerTiming::*field) const;
  // The fixed host cost of one forward or backward chunk-pass: its share of the per-micro-batch
  // overheads (the calibrated one per pass, the plan's microbatch_overhead_us per forward) and its
  // layers' gaps.
  double chunk_fixed_s(const ProgramOp& op, int64_t stage) const;

  const ModelSpec& m_;
  const ClusterSpec& c_;
  const Plan& p_;
  LayerTiming layer_, dense_layer_;  // an MoE model's own layers; its leading dense ones
  LayerTiming overlapped_layer_;     // layer_ in a pass whose all-to-alls overlap (exchange_overlapped)
  EdgeTiming edge_;
  P2pCost p2p_;
  Calibration::HostCost host_;  // looked up once: a step prices thousands of passes
  std::vector<double> layers_;  // per stage and chunk (stage x virtual_stages + chunk): its layers
  std::vector<double> dense_;   // per (stage, chunk): its leading dense layers
  int64_t group_size_[kGroupKinds] = {};  // by GroupKind
  LinkTier link_[kGroupKinds];
};

}  // namespace parallax
