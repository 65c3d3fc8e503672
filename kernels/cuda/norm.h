// CUDA layernorm and rmsnorm: the signatures of kernels/norm.h over device pointers, for fp32, bf16
// and fp16 activations. Statistics (mean, 1/std, 1/rms) and parameter gradients are fp32; weights
// are the 16-bit compute copies. Backward passes accumulate (+=) into dinp and into the fp32
// parameter gradients, like the CPU references.
#pragma once

#include "kernels/cuda/common.h"
#include "kernels/norm.h"

namespace parallax::kernels::cuda {

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int n, int c,
                       float eps = kNormEps);
template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int n, int c);
template <class T>
void rmsnorm_forward(T* out, float* rrms, const T* inp, const T* weight, int n, int c, float eps = kNormEps);
template <class T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight, const float* rrms, int n,
                      int c);

}  // namespace parallax::kernels::cuda
