// CUDA GELU (tanh approximation) and SwiGLU: kernels/activation.h over device pointers, for fp32,
// bf16 and fp16. Backward passes accumulate into dinp, or overwrite it with accumulate = false (no
// zeroing pass and no read of dinp where nothing is there to add to).
#pragma once

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

template <class T>
void gelu_forward(T* out, const T* inp, long n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n, bool accumulate = true);
// inp is N x 2F (gate in [0, F), up in [F, 2F) of each row); out is N x F.
template <class T>
void swiglu_forward(T* out, const T* inp, int n, int f);
template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int n, int f, bool accumulate = true);

}  // namespace parallax::kernels::cuda
