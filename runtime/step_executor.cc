#include "runtime/step_executor.h"

#include <cmath>

namespace parallax {

namespace {

StepStats optimizer(StepBackend& b, LossScaler& scaler, int64_t& updates, const StepSettings& s) {
  const double loss = b.loss_sum();
  const UpdateDecision d = decide_update(scaler, std::sqrt(b.gradient_sumsq()), s.clip_norm, s.skip);
  StepStats stats = d.stats;
  stats.loss = loss / s.tokens;
  if (stats.skipped) {
    b.discard_gradients();
  } else {
    b.apply_update(d.grad_scale, static_cast<int>(++updates));
  }
  return stats;
}

}  // namespace

StepStats execute_step(const StageProgram& stage, StepBackend& backend, LossScaler& scaler, int64_t& updates,
                       const StepSettings& settings) {
  StepStats stats;
  for (size_t i = 0; i < stage.ops.size(); ++i) {
    const ProgramOp& op = stage.ops[i];
    backend.op_begin(i, op);
    switch (op.type) {
      case ProgramOpType::kCompute: backend.compute(op); break;
      case ProgramOpType::kSend: backend.send(op); break;
      case ProgramOpType::kRecv: backend.recv(op); break;
      case ProgramOpType::kCollective: backend.collective(op); break;
      case ProgramOpType::kOptimizer: stats = optimizer(backend, scaler, updates, settings); break;
    }
    backend.op_end(i, op);
  }
  return stats;
}

}  // namespace parallax
