#include "runtime/optimizer_step.h"

#include <cmath>

namespace parallax {

void LossScaler::update(bool overflow) {
  if (scale == 1.0f && clean_steps == 0 && !overflow) return;  // not scaling
  if (overflow) {
    scale *= kBackoff;
    clean_steps = 0;
  } else if (++clean_steps % kGrowthInterval == 0) {
    scale *= kGrowth;
  }
}

UpdateDecision decide_update(LossScaler& scaler, double scaled_norm, double clip_norm, bool skip) {
  UpdateDecision d;
  const float used_scale = scaler.scale;  // the gradients were computed for loss x used_scale
  const bool overflow = !std::isfinite(scaled_norm);
  d.stats.grad_norm = scaled_norm / used_scale;
  d.stats.skipped = overflow || skip;
  if (!skip) scaler.update(overflow);
  d.stats.loss_scale = scaler.scale;
  const float clip = d.stats.grad_norm > clip_norm ? static_cast<float>(clip_norm / (d.stats.grad_norm + 1e-6)) : 1.0f;
  d.grad_scale = clip / used_scale;
  return d;
}

}  // namespace parallax
