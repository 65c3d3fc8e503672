// CUDA vocab-parallel softmax cross-entropy. The four pieces of kernels/cross_entropy.h over device
// pointers (logits fp32, bf16 or fp16; statistics fp32), and the fused loss + backward the GPU
// trainer uses: after the caller has combined the row statistics over the TP group, one pass
// writes each row's loss and overwrites the logits with their gradient, so the vocabulary-sized
// gradient never needs a buffer of its own (dlogits may equal logits).
#pragma once

#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

template <class T>
void row_max(float* max, const T* logits, int n, int v);
template <class T>
void row_sum_exp_and_target(float* sum_exp, float* target_logit, const T* logits, const float* max,
                            const int* targets, int n, int v, int vocab_start);
void cross_entropy_loss(float* losses, const float* max, const float* sum_exp, const float* target_logit, int n);
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const float* max, const float* sum_exp, const int* targets,
                            const float* dloss, int n, int v, int vocab_start);

// losses[i] = log(sum_exp) + max - target_logit; dlogits = (softmax - onehot) * dloss, every row
// weighted by the same dloss (the trainer's loss weight x loss scale). In place when dlogits == logits.
template <class T>
void cross_entropy_fused(float* losses, T* dlogits, const T* logits, const float* max, const float* sum_exp,
                         const float* target_logit, const int* targets, float dloss, int n, int v, int vocab_start);

}  // namespace parallax::kernels::cuda
