// Causal multi-head attention with grouped KV heads (GQA), materialized: scores and softmax
// probabilities are kept for the backward pass. Layouts are row-major per sequence:
// q [B, T, H, D], k and v [B, T, KVH, D] (H a multiple of KVH: query head h reads KV head
// h / (H / KVH)), out [B, T, H, D], probs [B, H, T, T]. Scale 1/sqrt(D).
#pragma once

namespace parallax::kernels {

struct AttentionShape {
  int b, t, h, kvh, d;
};

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, AttentionShape s);
// Accumulates into dq, dk, dv.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* probs, AttentionShape s);

// The reference of the fused GPU kernel (kernels/cuda/attention.h): the same attention keeping
// only one log-sum-exp per (sequence, head, query), lse [B, H, T], instead of the probabilities;
// the backward recomputes them. It writes dq, dk, dv (no accumulation).
void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, AttentionShape s);
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, AttentionShape s);

}  // namespace parallax::kernels
