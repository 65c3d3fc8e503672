#include "kernels/adamw.h"

#include <cmath>

namespace parallax::kernels {

void adamw_update(float* param, const float* grad, float* m, float* v, long n, const AdamWConfig& cfg, int step,
                  float grad_scale) {
  const float c1 = 1.0f - std::pow(cfg.beta1, static_cast<float>(step));
  const float c2 = 1.0f - std::pow(cfg.beta2, static_cast<float>(step));
  for (long i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    m[i] = cfg.beta1 * m[i] + (1.0f - cfg.beta1) * g;
    v[i] = cfg.beta2 * v[i] + (1.0f - cfg.beta2) * g * g;
    const float mhat = m[i] / c1, vhat = v[i] / c2;
    param[i] -= cfg.lr * (mhat / (std::sqrt(vhat) + cfg.eps) + cfg.weight_decay * param[i]);
  }
}

}  // namespace parallax::kernels
