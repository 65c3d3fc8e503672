#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace parallax::kernels {

namespace {
long qi(const AttentionShape& s, int b, int t, int h) { return ((static_cast<long>(b) * s.t + t) * s.h + h) * s.d; }
long ki(const AttentionShape& s, int b, int t, int h) { return ((static_cast<long>(b) * s.t + t) * s.kvh + h) * s.d; }
long pi(const AttentionShape& s, int b, int h, int t) { return ((static_cast<long>(b) * s.h + h) * s.t + t) * s.t; }
}  // namespace

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, AttentionShape s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const int group = s.h / s.kvh;
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.h; ++h)
      for (int t = 0; t < s.t; ++t) {
        const float* qv = q + qi(s, b, t, h);
        float* p = probs + pi(s, b, h, t);
        float max = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const float* kv = k + ki(s, b, u, h / group);
          float dot = 0;
          for (int i = 0; i < s.d; ++i) dot += qv[i] * kv[i];
          p[u] = dot * scale;
          max = std::max(max, p[u]);
        }
        float sum = 0;
        for (int u = 0; u <= t; ++u) sum += p[u] = std::exp(p[u] - max);
        for (int u = 0; u <= t; ++u) p[u] /= sum;
        for (int u = t + 1; u < s.t; ++u) p[u] = 0;
        float* o = out + qi(s, b, t, h);
        std::fill(o, o + s.d, 0.0f);
        for (int u = 0; u <= t; ++u) {
          const float* vv = v + ki(s, b, u, h / group);
          for (int i = 0; i < s.d; ++i) o[i] += p[u] * vv[i];
        }
      }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* probs, AttentionShape s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const int group = s.h / s.kvh;
  std::vector<float> dp(s.t);
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.h; ++h)
      for (int t = 0; t < s.t; ++t) {
        const float* p = probs + pi(s, b, h, t);
        const float* dy = dout + qi(s, b, t, h);
        // dP = dO V^T, dV += P^T dO; softmax backward dS = P (dP - sum(P dP)).
        float dot = 0;
        for (int u = 0; u <= t; ++u) {
          const float* vv = v + ki(s, b, u, h / group);
          float* dvv = dv + ki(s, b, u, h / group);
          dp[u] = 0;
          for (int i = 0; i < s.d; ++i) {
            dp[u] += dy[i] * vv[i];
            dvv[i] += p[u] * dy[i];
          }
          dot += p[u] * dp[u];
        }
        const float* qv = q + qi(s, b, t, h);
        float* dqv = dq + qi(s, b, t, h);
        for (int u = 0; u <= t; ++u) {
          const float ds = p[u] * (dp[u] - dot) * scale;
          const float* kv = k + ki(s, b, u, h / group);
          float* dkv = dk + ki(s, b, u, h / group);
          for (int i = 0; i < s.d; ++i) {
            dqv[i] += ds * kv[i];
            dkv[i] += ds * qv[i];
          }
        }
      }
}

}  // namespace parallax::kernels
