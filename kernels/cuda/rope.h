// CUDA rotary position embedding: kernels/rope.h over device pointers, in place on [B, T, H, D].
#pragma once

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

template <class T>
void rope_forward(T* x, int b, int t, int h, int d, float base);
template <class T>
void rope_backward(T* dx, int b, int t, int h, int d, float base);

}  // namespace parallax::kernels::cuda
