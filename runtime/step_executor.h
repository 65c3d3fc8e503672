// The step executor: the one loop both runtimes run. It walks a stage's StepProgram
// (program/step_program.h) in order and hands each op to the backend by kind — the CPU Trainer
// (Eigen, MPI) or the GPU trainer (CUDA, NCCL) — and runs the optimizer op's rule here, once:
// the step's loss over every stage and DP rank, the global gradient norm, dynamic loss scaling,
// clipping, and an update or (inf/NaN anywhere, or the skip hook) a skip on every rank alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "program/step_program.h"
#include "runtime/optimizer_step.h"

namespace parallax {

class StepBackend {
 public:
  virtual ~StepBackend() = default;
  virtual void compute(const ProgramOp& op) = 0;
  virtual void send(const ProgramOp& op) = 0;
  virtual void recv(const ProgramOp& op) = 0;
  virtual void collective(const ProgramOp& op) = 0;
  // The optimizer op's parts. loss_sum: the step's summed token loss over every stage and DP rank
  // (every rank gets it); gradient_sumsq: of the loss-scaled gradients over every rank, each
  // counted once; apply_update: AdamW with gradients scaled by `grad_scale`, `update` the 1-based
  // update count; discard_gradients: a skipped step.
  virtual double loss_sum() = 0;
  virtual double gradient_sumsq() = 0;
  virtual void apply_update(float grad_scale, int update) = 0;
  virtual void discard_gradients() = 0;
  // Around every op, e.g. to time it.
  virtual void op_begin(size_t /*index*/, const ProgramOp& /*op*/) {}
  virtual void op_end(size_t /*index*/, const ProgramOp& /*op*/) {}
};

struct StepSettings {
  double clip_norm = 1.0;
  bool skip = false;   // the test hook: skip this step as an overflow would
  double tokens = 1;   // tokens per step (the loss is their mean)
};

// Runs `stage`'s ops on `backend`; `scaler` and `updates` carry over between steps.
StepStats execute_step(const StageProgram& stage, StepBackend& backend, LossScaler& scaler, int64_t& updates,
                       const StepSettings& settings);

}  // namespace parallax
