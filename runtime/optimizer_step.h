// The end of a training step, written once for the CPU and GPU trainers: dynamic loss scaling,
// the global gradient norm, clipping, and the decision to update or to skip (on inf/NaN anywhere,
// every rank alike, since the norm is summed over all ranks).
#pragma once

#include <cstdint>

namespace parallax {

struct StepStats {
  double loss = 0;       // mean token loss over the global batch
  double grad_norm = 0;  // before clipping (unscaled)
  bool skipped = false;  // inf/NaN gradients on some rank: no update on any rank
  double loss_scale = 1;
};

// Dynamic loss scaling for fp16 (Micikevicius et al.): gradients are computed for loss x scale;
// an overflow anywhere skips the step on every rank and halves the scale; every 2,000 clean
// steps double it. Other precisions keep the scale at 1.
struct LossScaler {
  static constexpr float kInitial = 65536.0f, kBackoff = 0.5f, kGrowth = 2.0f;
  static constexpr int64_t kGrowthInterval = 2000;
  float scale = 1.0f;
  int64_t clean_steps = 0;
  void update(bool overflow);
};

struct UpdateDecision {
  StepStats stats;
  float grad_scale = 0;  // multiply gradients by this in AdamW (clip / loss scale); unused if skipped
};

// `scaled_norm`: the global gradient norm of the loss-scaled gradients; `skip`: the test hook that
// skips this step as an overflow would. Updates `scaler`.
UpdateDecision decide_update(LossScaler& scaler, double scaled_norm, double clip_norm, bool skip);

}  // namespace parallax
