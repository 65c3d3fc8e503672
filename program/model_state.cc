#include "program/model_state.h"

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
}  // namespace

ModelStateBytesPerParam bytes_per_param(Precision p, bool fp32_gradients) {
  // Mixed precision: 16-bit weights and gradients (fp32 with fp32_gradients), fp32 master weights
  // + Adam m and v (K = 12). fp32: weights, gradients, m, v at 4 bytes each.
  if (p == Precision::kFp32) return {4, 4, 8};
  return {2, fp32_gradients ? 4.0 : 2.0, 12};
}

ModelStateBytesPerParam bytes_per_param(const Plan& plan) {
  ModelStateBytesPerParam b = bytes_per_param(plan.precision, plan.execution.fp32_gradients);
  // bf16 optimizer states (Apex DistributedFusedAdam dtype=bf16): main copy, m and v at 2 bytes.
  if (plan.execution.bf16_optimizer_states && plan.precision != Precision::kFp32) b.optimizer = 6;
  return b;
}

double boundary_tensor_bytes(const ModelSpec& m, const Plan& plan) {
  return d(plan.seq_len) * d(plan.micro_batch) * d(m.hidden) * activation_element_bytes(plan.precision);
}

double stage_params_per_gpu(const ModelSpec& m, const Plan& plan, int64_t stage) {
  const LayerParams lp = layer_params(m);
  const EdgeParams e = edge_params(m);
  const double t = d(plan.tp);
  const int64_t layers = plan.uneven() ? plan.chunk_layers(m.layers, stage).count : m.layers / plan.pp;
  double params = d(layers) * (d(lp.tp_sharded) / t + d(lp.replicated));
  if (stage == 0) params += d(e.token_embedding) / t + d(e.position_embedding);
  if (stage == plan.pp - 1) {
    params += d(e.final_norm);
    // Megatron keeps a copy of a tied embedding on the last stage and all-reduces its gradient.
    if (m.tied_embeddings) {
      if (plan.pp > 1) params += d(e.token_embedding) / t;
    } else {
      params += d(e.output_head) / t;
    }
  }
  return params;
}

}  // namespace parallax
