// Softmax cross-entropy over logits split by vocabulary across TP ranks (Megatron's vocab-parallel
// loss): each rank computes per-row statistics over its columns, the caller combines them over
// the TP group (max: all-reduce max; sums: all-reduce sum), and each rank finishes the loss and
// its slice of the logit gradient. With one rank the pieces compose to the ordinary loss.
#pragma once

namespace parallax::kernels {

// Per row of logits [N, V_local]: the maximum.
void row_max(float* max, const float* logits, int n, int v);
// Per row: sum of exp(logit - max) (max already global) and the logit of the target if this
// rank's columns [vocab_start, vocab_start + v) hold it, else 0.
void row_sum_exp_and_target(float* sum_exp, float* target_logit, const float* logits, const float* max,
                            const int* targets, int n, int v, int vocab_start);
// loss_i = log(sum_exp) + max - target_logit (all global).
void cross_entropy_loss(float* losses, const float* max, const float* sum_exp, const float* target_logit, int n);
// dlogits = (softmax - onehot) * dloss_i, for this rank's columns; written, not accumulated.
void cross_entropy_backward(float* dlogits, const float* logits, const float* max, const float* sum_exp,
                            const int* targets, const float* dloss, int n, int v, int vocab_start);

}  // namespace parallax::kernels
