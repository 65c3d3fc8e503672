#include "program/model_state.h"

#include "program/schedule.h"

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
}  // namespace

ModelStateBytesPerParam bytes_per_param(Precision p, bool fp32_gradients) {
  // Mixed precision: 16-bit weights and gradients (fp32 with fp32_gradients), fp32 master weights
  // + Adam m and v (K = 12). fp32: weights, gradients, m, v at 4 bytes each.
  if (p == Precision::kFp32) return {4, 4, 8, 4};
  return {p == Precision::kFp8 ? 4.0 : 2.0, fp32_gradients ? 4.0 : 2.0, 12, 2};
}

ModelStateBytesPerParam bytes_per_param(const Plan& plan) {
  ModelStateBytesPerParam b = bytes_per_param(plan.precision, plan.execution.fp32_gradients);
  // bf16 optimizer states (Apex DistributedFusedAdam dtype=bf16): main copy, m and v at 2 bytes.
  if (plan.execution.bf16_optimizer_states && plan.precision != Precision::kFp32) b.optimizer = 6;
  if (plan.precision == Precision::kFp8 && plan.execution.fp8_param_gather) b.weights = 2, b.gathered = 1;
  return b;
}

double boundary_tensor_bytes(const ModelSpec& m, const Plan& plan) {
  return d(plan.seq_len / plan.cp) * d(plan.micro_batch) * d(m.hidden) * activation_element_bytes(plan.precision);
}

ActivationOptions activation_options(const Plan& plan) {
  ActivationOptions o{plan.seq_len, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute,
                      plan.execution.attention, plan.execution.selective};
  o.modules = plan.execution.recompute_modules;
  o.cp = plan.cp;
  o.fp8 = plan.precision == Precision::kFp8;
  o.recompute_fraction = plan.execution.recompute_fraction;
  return o;
}

int64_t chunk_dense_layers(const ModelSpec& m, const Plan& plan, int64_t stage, int64_t chunk) {
  const Plan::LayerRange r = plan.chunk_layers(m.layers, stage, chunk);
  return m.dense_layers_in(r.first, r.count);
}

int64_t stage_dense_layers(const ModelSpec& m, const Plan& plan, int64_t stage) {
  int64_t n = 0;
  for (int64_t c = 0; c < plan.virtual_stages; ++c) n += chunk_dense_layers(m, plan, stage, c);
  return n;
}

namespace {
// The parameters one GPU holds of `layers` layers (`dense` of them leading dense layers), plus the
// edges a pipeline end holds: the embedding on the first, the final norm and output head on the last.
StageParams params_on_gpu(const ModelSpec& m, const Plan& plan, int64_t layers, int64_t dense, bool first, bool last) {
  const EdgeParams e = edge_params(m);
  const double t = d(plan.tp);
  const LayerParams lp = layer_params(m), dp = layer_params(dense_layer_model(m));
  StageParams p;
  p.dense = d(layers - dense) * (d(lp.tp_sharded) / t + d(lp.replicated)) + d(dense) * (d(dp.tp_sharded) / t + d(dp.replicated));
  p.expert = d(layers - dense) * d(lp.expert) / (d(plan.expert_tp()) * d(plan.ep));
  if (first) p.dense += d(e.token_embedding) / t + d(e.position_embedding);
  if (last) {
    p.dense += d(e.final_norm) + d(e.output_head) / t;
    // Megatron keeps a copy of the embedding on the last stage and all-reduces its gradient.
    if (last_stage_holds_embedding(m, plan)) p.dense += d(e.token_embedding) / t;
    const LayerParams mtp = mtp_params(m);
    p.dense += d(mtp.tp_sharded) / t + d(mtp.replicated);
    p.expert += d(mtp.expert) / (d(plan.expert_tp()) * d(plan.ep));
  }
  return p;
}
}  // namespace

bool last_stage_holds_embedding(const ModelSpec& m, const Plan& plan) {
  return plan.pp > 1 && (m.tied_embeddings || m.mtp_layers > 0);
}

StageParams stage_param_split(const ModelSpec& m, const Plan& plan, int64_t stage) {
  // A stage's chunks hold layers / pp of the model (uneven stages: their own count).
  return params_on_gpu(m, plan, plan.stage_layers(m.layers, stage), stage_dense_layers(m, plan, stage), stage == 0,
                       stage == plan.pp - 1);
}

StageParams chunk_param_split(const ModelSpec& m, const Plan& plan, int64_t stage, int64_t chunk) {
  const int64_t vs = virtual_stage(stage, chunk, plan.pp);
  return params_on_gpu(m, plan, plan.chunk_layers(m.layers, stage, chunk).count, chunk_dense_layers(m, plan, stage, chunk),
                       vs == 0, vs == plan.pp * plan.virtual_stages - 1);
}

double stage_params_per_gpu(const ModelSpec& m, const Plan& plan, int64_t stage) {
  return stage_param_split(m, plan, stage).total();
}

double layer_params_per_gpu(const ModelSpec& m, const Plan& plan) { return params_on_gpu(m, plan, 1, 0, false, false).total(); }

}  // namespace parallax
