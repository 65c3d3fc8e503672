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
};
// The one place the bytes of each model state are decided. Mixed precision: 16-bit weights and
// gradients (`fp32_gradients`: 4-byte gradients, accumulated and reduced in fp32), fp32 master
// weights + Adam m and v (12). fp32: weights, gradients, m, v at 4 bytes each.
ModelStateBytesPerParam bytes_per_param(Precision p, bool fp32_gradients);
// The plan's precision, execution.fp32_gradients and execution.bf16_optimizer_states.
ModelStateBytesPerParam bytes_per_param(const Plan& plan);

// Bytes of one activation element: 4 in fp32, else 2 (bf16/fp16).
inline double activation_element_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }
// One micro-batch's activation at a layer boundary, b s h elements: what a TP collective and a
// pipeline transfer carry (before Megatron's scatter over the TP ranks).
double boundary_tensor_bytes(const ModelSpec& m, const Plan& plan);

// Parameters held by one GPU of pipeline stage `stage` before ZeRO sharding.
double stage_params_per_gpu(const ModelSpec& m, const Plan& plan, int64_t stage);

}  // namespace parallax
