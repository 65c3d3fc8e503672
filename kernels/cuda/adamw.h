// CUDA AdamW on fp32 master weights: kernels/adamw.h over device pointers, and a variant that also
// writes the updated weights' 16-bit compute copy in the same pass.
#pragma once

#include "kernels/adamw.h"
#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

void adamw_update(float* param, const float* grad, float* m, float* v, long n, const AdamWConfig& cfg, int step,
                  float grad_scale = 1.0f);
template <class T>
void adamw_update(float* param, T* compute_copy, const float* grad, float* m, float* v, long n,
                  const AdamWConfig& cfg, int step, float grad_scale = 1.0f);

}  // namespace parallax::kernels::cuda
