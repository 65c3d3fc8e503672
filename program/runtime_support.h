// What Parallax's own runtimes execute: the settings of a plan (and the model features) the CPU
// trainer (runtime/trainer.h) and the GPU trainer (runtime/cuda/gpu_trainer.h) run, and a
// one-line refusal naming the first one they do not. Here, beside the plan, so that the planner
// can restrict its search to what `train` runs (planner --runtime cpu|cuda) without linking a
// runtime.
#pragma once

#include "models/model_spec.h"
#include "models/status.h"
#include "program/plan.h"

namespace parallax {

// The CPU runtime (MPI ranks).
Status check_runtime_support(const ModelSpec& m, const Plan& plan);
// The GPU runtime. Real ranks also need a schedule whose send/receive groups cannot deadlock
// (pipeline_exchange.h); emulated ones (--emulate-rank) exchange with stand-ins that never wait.
Status check_gpu_support(const ModelSpec& m, const Plan& plan, bool emulated = false);

}  // namespace parallax
