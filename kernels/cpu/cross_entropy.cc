#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

namespace parallax::kernels {

void row_max(float* max, const float* logits, int n, int v) {
  for (int i = 0; i < n; ++i) {
    const float* l = logits + static_cast<long>(i) * v;
    max[i] = *std::max_element(l, l + v);
  }
}

void row_sum_exp_and_target(float* sum_exp, float* target_logit, const float* logits, const float* max,
                            const int* targets, int n, int v, int vocab_start) {
  for (int i = 0; i < n; ++i) {
    const float* l = logits + static_cast<long>(i) * v;
    double s = 0;
    for (int j = 0; j < v; ++j) s += std::exp(l[j] - max[i]);
    sum_exp[i] = static_cast<float>(s);
    const int col = targets[i] - vocab_start;
    target_logit[i] = col >= 0 && col < v ? l[col] : 0.0f;
  }
}

void cross_entropy_loss(float* losses, const float* max, const float* sum_exp, const float* target_logit, int n) {
  for (int i = 0; i < n; ++i) losses[i] = std::log(sum_exp[i]) + max[i] - target_logit[i];
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* max, const float* sum_exp,
                            const int* targets, const float* dloss, int n, int v, int vocab_start) {
  for (int i = 0; i < n; ++i) {
    const float* l = logits + static_cast<long>(i) * v;
    float* dl = dlogits + static_cast<long>(i) * v;
    for (int j = 0; j < v; ++j) dl[j] = std::exp(l[j] - max[i]) / sum_exp[i] * dloss[i];
    const int col = targets[i] - vocab_start;
    if (col >= 0 && col < v) dl[col] -= dloss[i];
  }
}

}  // namespace parallax::kernels
