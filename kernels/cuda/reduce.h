// CUDA reductions the GPU trainer needs once per step: the sum of squares behind the global
// gradient norm, and sums of per-token losses. Deterministic (fixed blocks, fixed order), in
// fp64 across blocks so a norm over a billion gradients does not lose digits.
#pragma once

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

// *out = sum of x[i]^2 (written, not accumulated).
void sum_squares(double* out, const float* x, long n);
// *acc += sum of x[i].
void sum_into(float* acc, const float* x, long n);

}  // namespace parallax::kernels::cuda
