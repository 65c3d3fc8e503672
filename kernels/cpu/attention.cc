#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace parallax::kernels {

namespace {
long qi(const AttentionShape& s, int b, int t, int h) { return ((static_cast<long>(b) * s.queries() + t) * s.h + h) * s.d; }
long ki(const AttentionShape& s, int b, int t, int h) { return ((static_cast<long>(b) * s.t + t) * s.kvh + h) * s.d; }
long pi(const AttentionShape& s, int b, int h, int t) { return ((static_cast<long>(b) * s.h + h) * s.queries() + t) * s.t; }
}  // namespace

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, AttentionShape s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  const int group = s.h / s.kvh;
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.h; ++h)
      for (int t = 0; t < s.queries(); ++t) {
        const int last = s.position(t);  // the causal mask: keys up to the query's position
        const float* qv = q + qi(s, b, t, h);
        float* p = probs + pi(s, b, h, t);
        float max = -INFINITY;
        for (int u = 0; u <= last; ++u) {
          const float* kv = k + ki(s, b, u, h / group);
          float dot = 0;
          for (int i = 0; i < s.d; ++i) dot += qv[i] * kv[i];
          p[u] = dot * scale;
          max = std::max(max, p[u]);
        }
        float sum = 0;
        for (int u = 0; u <= last; ++u) sum += p[u] = std::exp(p[u] - max);
        for (int u = 0; u <= last; ++u) p[u] /= sum;
        for (int u = last + 1; u < s.t; ++u) p[u] = 0;
        float* o = out + qi(s, b, t, h);
        std::fill(o, o + s.d, 0.0f);
        for (int u = 0; u <= last; ++u) {
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
      for (int t = 0; t < s.queries(); ++t) {
        const int last = s.position(t);
        const float* p = probs + pi(s, b, h, t);
        const float* dy = dout + qi(s, b, t, h);
        // dP = dO V^T, dV += P^T dO; softmax backward dS = P (dP - sum(P dP)).
        float dot = 0;
        for (int u = 0; u <= last; ++u) {
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
        for (int u = 0; u <= last; ++u) {
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

// The flash reference: the same attention without the probability matrix. Scores and sums are
// accumulated in double, so it is exact to fp32 output rounding and a fair reference for kernels
// that accumulate in fp32.
void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, AttentionShape s) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  const int group = s.h / s.kvh;
  std::vector<double> score(s.t), acc(s.d);
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.h; ++h)
      for (int t = 0; t < s.t; ++t) {
        const float* qv = q + qi(s, b, t, h);
        double max = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const float* kv = k + ki(s, b, u, h / group);
          double dot = 0;
          for (int i = 0; i < s.d; ++i) dot += static_cast<double>(qv[i]) * kv[i];
          score[u] = dot * scale;
          max = std::max(max, score[u]);
        }
        // Subtracting the max keeps exp() in range; lse adds it back: lse = max + log(sum exp(s - max)).
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int u = 0; u <= t; ++u) {
          const double p = std::exp(score[u] - max);
          const float* vv = v + ki(s, b, u, h / group);
          sum += p;
          for (int i = 0; i < s.d; ++i) acc[i] += p * vv[i];
        }
        float* o = out + qi(s, b, t, h);
        for (int i = 0; i < s.d; ++i) o[i] = static_cast<float>(acc[i] / sum);
        lse[(static_cast<long>(b) * s.h + h) * s.t + t] = static_cast<float>(max + std::log(sum));
      }
}

// P = exp(score - lse) is recomputed per (query, key); the softmax backward dS = P (dP - sum(P dP))
// uses sum(P dP) = sum(P dO V^T) = dO . O, the row's D_t, so no row of P is ever stored.
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, AttentionShape s) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  const int group = s.h / s.kvh;
  const long kv_size = static_cast<long>(s.b) * s.t * s.kvh * s.d;
  std::vector<double> dk_acc(kv_size, 0.0), dv_acc(kv_size, 0.0), dq_row(s.d);
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.h; ++h)
      for (int t = 0; t < s.t; ++t) {
        const float* qv = q + qi(s, b, t, h);
        const float* dy = dout + qi(s, b, t, h);
        const float* o = out + qi(s, b, t, h);
        const double row_lse = lse[(static_cast<long>(b) * s.h + h) * s.t + t];
        double d_t = 0;
        for (int i = 0; i < s.d; ++i) d_t += static_cast<double>(dy[i]) * o[i];
        std::fill(dq_row.begin(), dq_row.end(), 0.0);
        for (int u = 0; u <= t; ++u) {
          const float* kv = k + ki(s, b, u, h / group);
          const float* vv = v + ki(s, b, u, h / group);
          double score = 0, dp = 0;
          for (int i = 0; i < s.d; ++i) {
            score += static_cast<double>(qv[i]) * kv[i];
            dp += static_cast<double>(dy[i]) * vv[i];
          }
          const double p = std::exp(score * scale - row_lse);
          const double ds = p * (dp - d_t) * scale;
          double* dkv = dk_acc.data() + ki(s, b, u, h / group);
          double* dvv = dv_acc.data() + ki(s, b, u, h / group);
          for (int i = 0; i < s.d; ++i) {
            dvv[i] += p * dy[i];
            dkv[i] += ds * qv[i];
            dq_row[i] += ds * kv[i];
          }
        }
        float* dqv = dq + qi(s, b, t, h);
        for (int i = 0; i < s.d; ++i) dqv[i] = static_cast<float>(dq_row[i]);
      }
  for (long i = 0; i < kv_size; ++i) {
    dk[i] = static_cast<float>(dk_acc[i]);
    dv[i] = static_cast<float>(dv_acc[i]);
  }
}

}  // namespace parallax::kernels
