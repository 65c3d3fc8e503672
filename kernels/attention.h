// Causal multi-head attention with grouped KV heads (GQA), materialized: scores and softmax
// probabilities are kept for the backward pass. Layouts are row-major per sequence:
// q [B, T, H, D], k and v [B, T, KVH, D] (H a multiple of KVH: query head h reads KV head
// h / (H / KVH)), out [B, T, H, D], probs [B, H, T, T]. Scale 1/sqrt(D).
// Context parallelism: a rank's TQ queries (positions q_pos[i] in the sequence, the same for every
// sequence) attend to all T keys up to their position; q and out are then [B, TQ, H, D] and probs
// [B, H, TQ, T]. The materialized kernels take it; the flash references need TQ = T.
#pragma once

namespace parallax::kernels {

struct AttentionShape {
  int b, t, h, kvh, d;
  int tq = 0;                  // queries per sequence; 0: t
  const int* q_pos = nullptr;  // their positions; null: 0, 1, ...
  int queries() const { return tq > 0 ? tq : t; }
  int position(int i) const { return q_pos ? q_pos[i] : i; }
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
