// CUDA causal attention, fused and memory-efficient (FlashAttention-2's algorithm, Dao 2023): the
// s x s scores never reach memory; the forward keeps only the output and one log-sum-exp per
// (sequence, head, query), and the backward recomputes the probabilities from them tile by tile.
// Same layouts and GQA rule as kernels/attention.h; its CPU reference is
// kernels::flash_attention_forward / _backward, which keep the same two outputs.
#pragma once

#include "kernels/attention.h"
#include "kernels/cuda/common.h"

namespace parallax::kernels::cuda {

// out [B, T, H, D]; lse [B, H, T] (natural log of the row's sum of exp(score)).
template <class T>
void flash_attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s);
// Writes (does not accumulate) dq [B, T, H, D], dk and dv [B, T, KVH, D].
template <class T>
void flash_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                              const float* lse, AttentionShape s);

}  // namespace parallax::kernels::cuda
