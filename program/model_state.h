// Model-state sizes a plan implies, which the step program (gradient buckets), the memory model and
// the cost model all need: bytes per parameter of weights, gradients and optimizer states, and
// the parameters one GPU of a pipeline stage holds.
#pragma once

#include <cstdint>

#include "models/model_spec.h"
#include "program/plan.h"

namespace parallax {

struct ModelStateBytesPerParam {
  double weights, gradients, optimizer;
  double gathered = 0;  // what a weight all-gather moves per parameter (the working weights' type)
};
// The one place the bytes of each model state are decided. Mixed precision: 16-bit weights and
// gradients (`fp32_gradients`: 4-byte gradients, accumulated and reduced in fp32), fp32 master
// weights + Adam m and v (12). fp32: weights, gradients, m, v at 4 bytes each.
ModelStateBytesPerParam bytes_per_param(Precision p, bool fp32_gradients);
// The plan's precision, execution.fp32_gradients and execution.bf16_optimizer_states. FP8 keeps
// each weight's FP8 copy and its FP8 transpose beside the 16-bit weight (Transformer Engine on
// Hopper): 2 + 1 + 1 bytes; with fp8_param_gather the FP8 copy is the working weight, gathered at
// 1 byte, and the 16-bit one is dropped: 1 + 1.
ModelStateBytesPerParam bytes_per_param(const Plan& plan);

// Bytes of one activation element: 4 in fp32, else 2 (bf16/fp16).
inline double activation_element_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }
// One micro-batch's activation at a layer boundary, b s h elements (b s/cp h with CP): what a TP
// collective and a pipeline transfer carry (before Megatron's scatter over the TP ranks).
double boundary_tensor_bytes(const ModelSpec& m, const Plan& plan);

// The activation-memory options of a plan (layer_cost.h).
ActivationOptions activation_options(const Plan& plan);

// Parameters held by one GPU of pipeline stage `stage` before ZeRO sharding: dense ones (divided by
// TP where split) and routed experts' (divided by TP and EP), which reduce and shard over
// different groups (RankGrid kDp, kExpertDp).
struct StageParams {
  double dense = 0, expert = 0;
  double total() const { return dense + expert; }
};
// The leading dense layers (ModelSpec::dense_layers) in one chunk of a stage, and in all its chunks.
int64_t chunk_dense_layers(const ModelSpec& m, const Plan& plan, int64_t stage, int64_t chunk);
int64_t stage_dense_layers(const ModelSpec& m, const Plan& plan, int64_t stage);
StageParams stage_param_split(const ModelSpec& m, const Plan& plan, int64_t stage);
// Those of one chunk of a stage (the first and last virtual stage holding the edges); the
// chunks' sum is the stage's.
StageParams chunk_param_split(const ModelSpec& m, const Plan& plan, int64_t stage, int64_t chunk);
double stage_params_per_gpu(const ModelSpec& m, const Plan& plan, int64_t stage);
// Whether the last pipeline stage keeps a copy of the token embedding, whose gradient is summed
// with the first stage's: a tied embedding (it is the output head) or multi-token prediction
// (its depths embed the next tokens), over more than one stage.
bool last_stage_holds_embedding(const ModelSpec& m, const Plan& plan);
// One (MoE, where the model has them) transformer layer's parameters on one GPU, as a stage counts them.
double layer_params_per_gpu(const ModelSpec& m, const Plan& plan);

}  // namespace parallax
