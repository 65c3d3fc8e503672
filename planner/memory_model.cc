#include "planner/memory_model.h"

#include <algorithm>
#include <cmath>

#include "simulator/step_costs.h"

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
constexpr double kMiB = 1048576.0;
}  // namespace

double zero_model_state_bytes(double params, int64_t dp, int zero_stage, Precision p, bool fp32_gradients) {
  const ModelStateBytesPerParam b = bytes_per_param(p, fp32_gradients);
  const double n = d(dp);
  double weights = b.weights * params, grads = b.gradients * params, opt = b.optimizer * params;
  if (zero_stage >= 1) opt /= n;
  if (zero_stage >= 2) grads /= n;
  if (zero_stage >= 3) weights /= n;
  return weights + grads + opt;
}

int64_t in_flight_chunk_passes(Schedule s, int64_t pp, int64_t m, int64_t v, int64_t stage) {
  switch (s) {
    case Schedule::kGpipe: return m;
    case Schedule::k1F1B: return std::min(pp - stage, m);
    case Schedule::kZbH1: return std::min(pp, m);
    case Schedule::kInterleaved: return std::min(m * v, 2 * (pp - stage - 1) + (v - 1) * pp + 1);
  }
  return m;
}

MemoryBreakdown stage_memory(const ModelSpec& m, const Plan& plan, int64_t stage, double reserved_bytes,
                             int64_t in_flight) {
  MemoryBreakdown mem;
  const ModelStateBytesPerParam bpp = bytes_per_param(plan);
  const StageParams split = stage_param_split(m, plan, stage);
  const double params = split.total();
  // ZeRO shards the dense parameters' states over shard_degree() and the experts' over the
  // expert data-parallel ranks.
  const double dp = d(plan.shard_degree());
  const double sharded = split.dense / dp + split.expert / d(plan.expert_data_ranks());
  mem.weights = (plan.zero >= 3 ? sharded : params) * bpp.weights;
  mem.gradients = (plan.zero >= 2 ? sharded : params) * bpp.gradients;
  mem.optimizer = (plan.zero >= 1 ? sharded : params) * bpp.optimizer;
  if (plan.offload) {
    mem.host += mem.optimizer;
    mem.optimizer = 0;
    if (plan.zero >= 3) {
      mem.host += mem.weights;
      mem.weights = 0;
    }
  }

  const ActivationOptions ao = activation_options(plan);
  const int64_t mbs = plan.micro_batches();
  // Per chunk pass, over the stage's chunks (the in-flight passes are spread over them): their
  // mean, the leading dense layers holding their own.
  const double chunks = d(plan.virtual_stages);
  const double dense = d(stage_dense_layers(m, plan, stage)) / chunks;
  const double moe = d(plan.stage_layers(m.layers, stage)) / chunks - dense;
  const LayerActivations layer = layer_activation_bytes(m, ao);
  double per_pass = moe * layer.total() + dense * layer_activation_bytes(dense_layer_model(m), ao).total();
  // The busiest EP rank keeps more routed tokens than the mean. expert_load is one layer's busiest
  // rank, 1 + z_ep σ; each layer's hot experts are its own, so which rank is busiest is drawn anew
  // per layer, and over the stage's n MoE layers the busiest sum is n + z_ep σ √n: the routed
  // bytes grow by (expert_load - 1) / √n.
  if (m.is_moe() && plan.ep > 1 && moe > 0)
    per_pass += moe * layer.routed * (expert_load(m, plan) - 1) / std::sqrt(moe * chunks);
  const int64_t passes =
      in_flight >= 0 ? in_flight : in_flight_chunk_passes(plan.schedule, plan.pp, mbs, plan.virtual_stages, stage);
  double acts = d(passes) * per_pass;
  const bool gpipe = plan.schedule == Schedule::kGpipe;
  if (stage == 0) acts += first_stage_extra_activation_bytes(m, ao) * d(gpipe ? mbs : std::min(plan.pp, mbs));
  if (stage == plan.pp - 1) acts += last_stage_extra_activation_bytes(m, ao) * d(gpipe ? mbs : 1);
  // The per-layer formulas assume 16-bit activations; fp32 training stores twice the bytes.
  mem.activations = acts * (plan.precision == Precision::kFp32 ? 2.0 : 1.0);

  const double boundary = boundary_tensor_bytes(m, plan) /
                          (plan.sequence_parallel ? d(plan.tp) : 1.0);
  if (plan.pp > 1) mem.buffers += 4 * boundary;  // send and receive, forward and backward
  // One gradient bucket staged for its reduction (the runtimes copy a bucket out, reduce it and
  // copy it back; frameworks that reduce views of the gradient buffer need less). A bucket holds
  // at most one chunk's gradients.
  const double chunk_grads = params * bpp.gradients / d(plan.virtual_stages);
  if (plan.data_ranks() > 1) mem.buffers += std::min(plan.execution.dp_bucket_mib * kMiB, chunk_grads);
  if (plan.zero >= 3 && plan.data_ranks() > 1) {
    // ZeRO-3 gathers the current layer and prefetches the next.
    mem.buffers += 2 * d(layer_params(m).total()) / d(plan.tp) * bpp.weights;
  }
  // Weights, the gradient buffer and optimizer states are allocated once, in a few large buffers
  // (Megatron's contiguous param and grad buffers, FSDP's flat parameters): the caching
  // allocator fragments what comes and goes every step, activations and staging buffers.
  mem.margin = plan.execution.allocator_margin * (mem.activations + mem.buffers) + reserved_bytes;
  return mem;
}

MemoryBreakdown peak_memory(const ModelSpec& m, const Plan& plan, double reserved_bytes) {
  // With equal stages, middle stages hold no embedding or logits and no more in-flight
  // activations than stage 0 (in-flight counts fall with the stage index), so the peak is on the
  // first or the last stage; with uneven ones the second stage can exceed a lighter first.
  MemoryBreakdown peak = stage_memory(m, plan, 0, reserved_bytes);
  auto consider = [&](int64_t s) {
    MemoryBreakdown other = stage_memory(m, plan, s, reserved_bytes);
    if (other.total() > peak.total()) peak = other;
  };
  if (!plan.pipeline_layout.empty()) {  // any stage can hold the most
    for (int64_t s = 1; s < plan.pp; ++s) consider(s);
    return peak;
  }
  for (int64_t s : {int64_t{1}, plan.pp - 1})
    if (s < plan.pp && (s != 1 || plan.uneven())) consider(s);
  return peak;
}

}  // namespace parallax
