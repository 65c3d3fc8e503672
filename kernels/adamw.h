// AdamW (Loshchilov and Hutter) on fp32 master weights: decoupled weight decay, bias-corrected
// moments. `step` counts from 1.
#pragma once

namespace parallax::kernels {

struct AdamWConfig {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

void adamw_update(float* param, const float* grad, float* m, float* v, long n, const AdamWConfig& cfg, int step,
                  float grad_scale = 1.0f);

}  // namespace parallax::kernels
