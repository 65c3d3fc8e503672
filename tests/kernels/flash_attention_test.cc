// The flash attention reference (kernels/attention.h): the same function as the materialised
// attention, keeping one log-sum-exp per row instead of the probabilities. Pinned by a hand-derived
// case and by agreement with attention_forward / attention_backward for MHA and GQA.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"

namespace parallax::kernels {
namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// B = 1, T = 2, H = KVH = 1, D = 1, so scale = 1/sqrt(1) = 1 and score(t, u) = q_t k_u.
// q = (2, 1), k = (c, c + ln 3), v = (1, 5):
//   t = 0 sees only u = 0: out_0 = v_0 = 1, lse_0 = score = 2c.
//   t = 1: scores c and c + ln 3, exp(score - c) = 1 and 3, sum 4:
//          out_1 = (1 * 1 + 3 * 5) / 4 = 4, lse_1 = c + ln 4.
// c = 0 checks the formula; c = 1000 checks that lse includes the max (exp(1000) overflows even
// in double, so a kernel that skipped the max would return inf).
TEST(FlashAttention, HandDerivedTwoTokens) {
  const AttentionShape s{1, 2, 1, 1, 1};
  for (const float c : {0.0f, 1000.0f}) {
    const Vec q = {2.0f, 1.0f}, k = {c, c + std::log(3.0f)}, v = {1.0f, 5.0f};
    Vec out(2), lse(2);
    flash_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    // c + ln 3 rounds to fp32 (ulp(1000) = 6e-5), hence the looser bound for c = 1000.
    const double tol = c == 0.0f ? 1e-6 : 1e-3;
    EXPECT_NEAR(out[0], 1.0, tol) << "c = " << c;
    EXPECT_NEAR(out[1], 4.0, tol) << "c = " << c;
    EXPECT_NEAR(lse[0], 2.0 * c, tol) << "c = " << c;
    EXPECT_NEAR(lse[1], c + std::log(4.0), tol) << "c = " << c;
  }
}

// out equals the materialised forward, and exp(score - lse) equals its probabilities.
void expect_forward_matches(AttentionShape s, unsigned seed) {
  const long qn = long(s.b) * s.t * s.h * s.d, kn = long(s.b) * s.t * s.kvh * s.d;
  const Vec q = random_vec(qn, seed), k = random_vec(kn, seed + 1), v = random_vec(kn, seed + 2);
  Vec out(qn), probs(long(s.b) * s.h * s.t * s.t), flash_out(qn), lse(long(s.b) * s.h * s.t);
  attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s);
  flash_attention_forward(flash_out.data(), lse.data(), q.data(), k.data(), v.data(), s);
  for (long i = 0; i < qn; ++i) EXPECT_NEAR(flash_out[i], out[i], 1e-5) << "element " << i;
  const int group = s.h / s.kvh;
  const double scale = 1.0 / std::sqrt(double(s.d));
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.h; ++h)
      for (int t = 0; t < s.t; ++t)
        for (int u = 0; u <= t; ++u) {
          double score = 0;
          for (int i = 0; i < s.d; ++i)
            score += double(q[((long(b) * s.t + t) * s.h + h) * s.d + i]) *
                     k[((long(b) * s.t + u) * s.kvh + h / group) * s.d + i];
          const double p = std::exp(score * scale - lse[(long(b) * s.h + h) * s.t + t]);
          EXPECT_NEAR(p, probs[((long(b) * s.h + h) * s.t + t) * s.t + u], 1e-5)
              << "b " << b << " h " << h << " t " << t << " u " << u;
        }
}

// The flash backward writes what attention_backward accumulates onto zeros; its outputs start as
// garbage to show they are written, not accumulated.
void expect_backward_matches(AttentionShape s, unsigned seed) {
  const long qn = long(s.b) * s.t * s.h * s.d, kn = long(s.b) * s.t * s.kvh * s.d;
  const Vec q = random_vec(qn, seed), k = random_vec(kn, seed + 1), v = random_vec(kn, seed + 2),
            dout = random_vec(qn, seed + 3);
  Vec out(qn), probs(long(s.b) * s.h * s.t * s.t), lse(long(s.b) * s.h * s.t);
  attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s);
  Vec dq(qn, 0.0f), dk(kn, 0.0f), dv(kn, 0.0f);
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), probs.data(), s);
  Vec flash_out(qn), fdq(qn, 7.0f), fdk(kn, 7.0f), fdv(kn, 7.0f);
  flash_attention_forward(flash_out.data(), lse.data(), q.data(), k.data(), v.data(), s);
  flash_attention_backward(fdq.data(), fdk.data(), fdv.data(), dout.data(), q.data(), k.data(), v.data(),
                           flash_out.data(), lse.data(), s);
  for (long i = 0; i < qn; ++i) EXPECT_NEAR(fdq[i], dq[i], 1e-4 * (1 + std::abs(dq[i]))) << "dq " << i;
  for (long i = 0; i < kn; ++i) {
    EXPECT_NEAR(fdk[i], dk[i], 1e-4 * (1 + std::abs(dk[i]))) << "dk " << i;
    EXPECT_NEAR(fdv[i], dv[i], 1e-4 * (1 + std::abs(dv[i]))) << "dv " << i;
  }
}

TEST(FlashAttention, ForwardMatchesMaterialisedMha) { expect_forward_matches({2, 5, 2, 2, 3}, 30); }
TEST(FlashAttention, ForwardMatchesMaterialisedGqa) { expect_forward_matches({2, 5, 4, 2, 3}, 40); }
TEST(FlashAttention, BackwardMatchesMaterialisedMha) { expect_backward_matches({2, 5, 2, 2, 3}, 50); }
TEST(FlashAttention, BackwardMatchesMaterialisedGqa) { expect_backward_matches({2, 6, 4, 2, 4}, 60); }

}  // namespace
}  // namespace parallax::kernels
