// CUDA vocab-parallel token (and learned position) embedding: kernels/embedding.h over device
// pointers. The backward accumulates into fp32 gradients of the tables.
#pragma once

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

template <class T>
void embedding_forward(T* out, const int* tokens, const T* wte, const T* wpe, int n, int t, int c, int vocab_start,
                       int vocab_local, bool add_positions);
template <class T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int* tokens, int n, int t, int c,
                        int vocab_start, int vocab_local);

}  // namespace parallax::kernels::cuda
