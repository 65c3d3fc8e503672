// CPU reference kernels: hand-derived values, and every backward against central finite
// differences of L = sum(dout * forward(x)) with random dout.
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/activation.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace parallax::kernels {
namespace {

using Vec = std::vector<float>;

Vec random(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Checks grad (the analytical dL/dx) against central differences of L(x) = sum(dout * f(x)).
void expect_gradient(Vec x, const Vec& grad, const std::function<Vec(const Vec&)>& f, const Vec& dout,
                     double tol = 2e-3) {
  const float h = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double up = dot(f(x), dout);
    x[i] = saved - h;
    const double down = dot(f(x), dout);
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(grad[i], numeric, tol * (1 + std::abs(numeric))) << "element " << i;
  }
}

TEST(Matmul, ForwardAndGradients) {
  const int n = 3, c = 4, oc = 5;
  const Vec x = random(n * c, 1), w = random(oc * c, 2), b = random(oc, 3), dout = random(n * oc, 4);
  Vec y(n * oc);
  // Hand check of one entry: y[0][0] = sum_k x[0][k] w[0][k] + b[0].
  matmul_forward(y.data(), x.data(), w.data(), b.data(), n, c, oc);
  EXPECT_NEAR(y[0], x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3] + b[0], 1e-5);
  Vec dx(n * c), dw(oc * c), db(oc);
  matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), n, c, oc);
  auto fx = [&](const Vec& xv) { Vec o(n * oc); matmul_forward(o.data(), xv.data(), w.data(), b.data(), n, c, oc); return o; };
  auto fw = [&](const Vec& wv) { Vec o(n * oc); matmul_forward(o.data(), x.data(), wv.data(), b.data(), n, c, oc); return o; };
  auto fb = [&](const Vec& bv) { Vec o(n * oc); matmul_forward(o.data(), x.data(), w.data(), bv.data(), n, c, oc); return o; };
  expect_gradient(x, dx, fx, dout);
  expect_gradient(w, dw, fw, dout);
  expect_gradient(b, db, fb, dout);
}

// [1, 2, 3]: mean 2, variance 2/3, so outputs (x - 2) / sqrt(2/3 + 1e-5) = -1.22473, 0, 1.22473.
TEST(LayerNorm, HandValuesAndGradients) {
  const Vec x1 = {1, 2, 3}, ones = {1, 1, 1}, zeros = {0, 0, 0};
  Vec y(3), mean(1), rstd(1);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x1.data(), ones.data(), zeros.data(), 1, 3);
  EXPECT_NEAR(y[0], -1.0f / std::sqrt(2.0f / 3 + 1e-5f), 1e-5);
  EXPECT_NEAR(y[1], 0, 1e-6);
  const int n = 2, c = 6;
  const Vec x = random(n * c, 5), w = random(c, 6), b = random(c, 7), dout = random(n * c, 8);
  Vec m(n), r(n), out(n * c), dx(n * c), dw(c), db(c);
  layernorm_forward(out.data(), m.data(), r.data(), x.data(), w.data(), b.data(), n, c);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), m.data(), r.data(), n, c);
  auto f = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    Vec o(n * c), mm(n), rr(n);
    layernorm_forward(o.data(), mm.data(), rr.data(), xv.data(), wv.data(), bv.data(), n, c);
    return o;
  };
  expect_gradient(x, dx, [&](const Vec& v) { return f(v, w, b); }, dout);
  expect_gradient(w, dw, [&](const Vec& v) { return f(x, v, b); }, dout);
  expect_gradient(b, db, [&](const Vec& v) { return f(x, w, v); }, dout);
}

// [3, 4]: rms = sqrt((9 + 16) / 2) = 3.5355, outputs 0.84853, 1.13137.
TEST(RmsNorm, HandValuesAndGradients) {
  const Vec x1 = {3, 4}, ones = {1, 1};
  Vec y(2), rr(1);
  rmsnorm_forward(y.data(), rr.data(), x1.data(), ones.data(), 1, 2);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5f + 1e-5f), 1e-5);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5f + 1e-5f), 1e-5);
  const int n = 3, c = 5;
  const Vec x = random(n * c, 9), w = random(c, 10), dout = random(n * c, 11);
  Vec r(n), out(n * c), dx(n * c), dw(c);
  rmsnorm_forward(out.data(), r.data(), x.data(), w.data(), n, c);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), r.data(), n, c);
  auto f = [&](const Vec& xv, const Vec& wv) { Vec o(n * c), rv(n); rmsnorm_forward(o.data(), rv.data(), xv.data(), wv.data(), n, c); return o; };
  expect_gradient(x, dx, [&](const Vec& v) { return f(v, w); }, dout);
  expect_gradient(w, dw, [&](const Vec& v) { return f(x, v); }, dout);
}

// A zero-bubble schedule's B asks a backward for the input gradient alone and its W for the
// parameter gradients alone (without the weight, which ZeRO-3 has released by then): the two
// calls give exactly the combined call's values, accumulated onto what is there.
TEST(Backward, InputAndParameterGradientsSeparately) {
  const int n = 3, c = 8, oc = 5;
  const Vec x = random(n * c, 12), w = random(oc * c, 13), dout = random(n * oc, 14), start = random(n * c, 15);
  Vec dx(start), dw(oc * c, 0.5f), db(oc, 0.25f), dx2(start), dw2(dw), db2(db);
  matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), n, c, oc);
  matmul_backward(dx2.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), n, c, oc);
  EXPECT_EQ(dx2, dx);
  matmul_backward(nullptr, dw2.data(), db2.data(), dout.data(), x.data(), nullptr, n, c, oc);
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
  const Vec g = random(c, 16), bias = random(c, 17), dy = random(n * c, 18);
  for (bool layer : {true, false}) {
    Vec out(n * c), mean(n), rstd(n), din(start), dg(c, 0.5f), dbias(c, 0.25f), din2(start), dg2(dg), dbias2(dbias);
    if (layer) {
      layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), bias.data(), n, c);
      layernorm_backward(din.data(), dg.data(), dbias.data(), dy.data(), x.data(), g.data(), mean.data(), rstd.data(), n, c);
      layernorm_backward(din2.data(), nullptr, nullptr, dy.data(), x.data(), g.data(), mean.data(), rstd.data(), n, c);
      layernorm_backward(nullptr, dg2.data(), dbias2.data(), dy.data(), x.data(), nullptr, mean.data(), rstd.data(), n, c);
    } else {
      rmsnorm_forward(out.data(), rstd.data(), x.data(), g.data(), n, c);
      rmsnorm_backward(din.data(), dg.data(), dy.data(), x.data(), g.data(), rstd.data(), n, c);
      rmsnorm_backward(din2.data(), nullptr, dy.data(), x.data(), g.data(), rstd.data(), n, c);
      rmsnorm_backward(nullptr, dg2.data(), dy.data(), x.data(), nullptr, rstd.data(), n, c);
    }
    EXPECT_EQ(din2, din) << (layer ? "layernorm" : "rmsnorm");
    EXPECT_EQ(dg2, dg) << (layer ? "layernorm" : "rmsnorm");
    EXPECT_EQ(dbias2, dbias) << (layer ? "layernorm" : "rmsnorm");
  }
}

// relu2(-1.5) = 0, relu2(3) = 9; its gradient 2 max(x, 0) matches finite differences away from 0.
TEST(Activations, SquaredRelu) {
  const Vec pts = {-1.5f, 3.0f};
  Vec y(2);
  relu2_forward(y.data(), pts.data(), 2);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 9.0f);
  const Vec x = {-0.7f, -0.2f, 0.3f, 0.9f, 1.4f}, dout = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  Vec dx(5);
  relu2_backward(dx.data(), x.data(), dout.data(), 5);
  expect_gradient(x, dx, [](const Vec& v) { Vec o(v.size()); relu2_forward(o.data(), v.data(), long(v.size())); return o; }, dout);
}

// GELU (tanh form): gelu(0) = 0, gelu(1) = 0.5 (1 + tanh(0.79788 * 1.044715)) = 0.841192.
TEST(Activations, GeluAndSwiglu) {
  const Vec pts = {0.0f, 1.0f};
  Vec y(2);
  gelu_forward(y.data(), pts.data(), 2);
  EXPECT_NEAR(y[0], 0, 1e-7);
  EXPECT_NEAR(y[1], 0.841192f, 1e-5);
  const Vec x = random(12, 12), dout = random(12, 13);
  Vec dx(12);
  gelu_backward(dx.data(), x.data(), dout.data(), 12);
  expect_gradient(x, dx, [](const Vec& v) { Vec o(v.size()); gelu_forward(o.data(), v.data(), long(v.size())); return o; }, dout);
  // SwiGLU of gate 1, up 2: 1 * sigmoid(1) * 2 = 1.462117.
  const Vec gu = {1.0f, 2.0f};
  Vec s(1);
  swiglu_forward(s.data(), gu.data(), 1, 1);
  EXPECT_NEAR(s[0], 2.0f / (1.0f + std::exp(-1.0f)), 1e-6);
  const int n = 2, f = 3;
  const Vec in = random(n * 2 * f, 14), dsw = random(n * f, 15);
  Vec din(n * 2 * f);
  swiglu_backward(din.data(), in.data(), dsw.data(), n, f);
  expect_gradient(in, din, [&](const Vec& v) { Vec o(n * f); swiglu_forward(o.data(), v.data(), n, f); return o; }, dsw);
}

TEST(Attention, FirstTokenAttendsOnlyToItselfAndGradients) {
  const AttentionShape s{2, 4, 4, 2, 3};  // GQA: 4 query heads share 2 KV heads
  const long qn = long(s.b) * s.t * s.h * s.d, kn = long(s.b) * s.t * s.kvh * s.d;
  const Vec q = random(qn, 16), k = random(kn, 17), v = random(kn, 18), dout = random(qn, 19);
  Vec out(qn), probs(long(s.b) * s.h * s.t * s.t);
  attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s);
  // Position 0 sees only itself: its output is its KV head's v.
  for (int i = 0; i < s.d; ++i) EXPECT_NEAR(out[i], v[i], 1e-6);
  EXPECT_NEAR(out[s.d * 2 + 0], v[s.d * 1 + 0], 1e-6);  // query head 2 reads KV head 1
  Vec dq(qn), dk(kn), dv(kn);
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), probs.data(), s);
  auto f = [&](const Vec& qv, const Vec& kv, const Vec& vv) {
    Vec o(qn), p(probs.size());
    attention_forward(o.data(), p.data(), qv.data(), kv.data(), vv.data(), s);
    return o;
  };
  expect_gradient(q, dq, [&](const Vec& x) { return f(x, k, v); }, dout);
  expect_gradient(k, dk, [&](const Vec& x) { return f(q, x, v); }, dout);
  expect_gradient(v, dv, [&](const Vec& x) { return f(q, k, x); }, dout);
}

// Context parallelism: a rank's queries at positions {1, 2} of a 4-token sequence attend to all
// 4 keys under the causal mask — the same outputs and gradients as rows 1 and 2 of the full
// attention (the key gradients then hold only these queries' share).
TEST(Attention, QueriesAtTheirPositionsMatchTheFullRows) {
  const AttentionShape full{1, 4, 2, 1, 3};
  const long qn = long(full.t) * full.h * full.d, kn = long(full.t) * full.kvh * full.d, row = long(full.h) * full.d;
  const Vec q = random(qn, 30), k = random(kn, 31), v = random(kn, 32), dout = random(qn, 33);
  Vec out(qn), probs(long(full.h) * full.t * full.t);
  attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), full);
  const int pos[2] = {1, 2};
  AttentionShape part = full;
  part.tq = 2, part.q_pos = pos;
  const Vec q_part(q.begin() + row, q.begin() + 3 * row), d_part(dout.begin() + row, dout.begin() + 3 * row);
  Vec o_part(2 * row), p_part(long(full.h) * 2 * full.t);
  attention_forward(o_part.data(), p_part.data(), q_part.data(), k.data(), v.data(), part);
  for (long i = 0; i < 2 * row; ++i) EXPECT_NEAR(o_part[i], out[row + i], 1e-6);
  // Backward with the gradient only on rows 1 and 2, full and partial, agree.
  Vec d_rows(qn, 0.0f);
  std::copy(d_part.begin(), d_part.end(), d_rows.begin() + row);
  Vec dq(qn), dk(kn), dv(kn), dq_part(2 * row), dk_part(kn), dv_part(kn);
  attention_backward(dq.data(), dk.data(), dv.data(), d_rows.data(), q.data(), k.data(), v.data(), probs.data(), full);
  attention_backward(dq_part.data(), dk_part.data(), dv_part.data(), d_part.data(), q_part.data(), k.data(), v.data(),
                     p_part.data(), part);
  for (long i = 0; i < 2 * row; ++i) EXPECT_NEAR(dq_part[i], dq[row + i], 1e-6);
  for (long i = 0; i < kn; ++i) {
    EXPECT_NEAR(dk_part[i], dk[i], 1e-6);
    EXPECT_NEAR(dv_part[i], dv[i], 1e-6);
  }
}

// RoPE at explicit positions {2, 0} rotates each row as its position does in the full sequence.
TEST(Rope, ExplicitPositions) {
  const int h = 1, d = 4;
  const Vec x = random(3 * h * d, 34);
  Vec all = x;
  rope_forward(all.data(), 1, 3, h, d, d, 10000.0f);
  Vec two(x.begin() + 2 * d, x.end());
  two.insert(two.end(), x.begin(), x.begin() + d);  // rows: position 2, then position 0
  const int pos[2] = {2, 0};
  rope_forward(two.data(), 1, 2, h, d, d, 10000.0f, pos);
  for (int i = 0; i < d; ++i) {
    EXPECT_NEAR(two[i], all[2 * d + i], 1e-6);
    EXPECT_NEAR(two[d + i], all[i], 1e-6);
  }
}

TEST(Rope, PositionZeroIsIdentityAndBackwardIsTheInverse) {
  const int b = 1, t = 3, h = 2, d = 4;
  const Vec x = random(b * t * h * d, 20);
  Vec y = x;
  rope_forward(y.data(), b, t, h, d, d, 10000.0f);
  for (int i = 0; i < h * d; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
  // Position 1, pair (0, 2) rotates by 1 radian.
  const int base = h * d;
  EXPECT_NEAR(y[base + 0], x[base + 0] * std::cos(1.0f) - x[base + 2] * std::sin(1.0f), 1e-6);
  rope_backward(y.data(), b, t, h, d, d, 10000.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

// Nemotron's partial rotary: with R = 4 of D = 8 dimensions, pair (i, i + 2) of the first four
// rotates by t * base^(-2i/4); at position 1 and i = 0 that is 1 radian, at i = 1 it is
// 10000^(-1/2) = 0.01 radian; dimensions 4..7 pass through.
TEST(Rope, PartialRotaryRotatesOnlyTheLeadingDimensions) {
  const int b = 1, t = 2, h = 1, d = 8, r = 4;
  const Vec x = random(b * t * h * d, 23);
  Vec y = x;
  rope_forward(y.data(), b, t, h, d, r, 10000.0f);
  const float* p = x.data() + d;  // position 1
  EXPECT_NEAR(y[d + 0], p[0] * std::cos(1.0f) - p[2] * std::sin(1.0f), 1e-6);
  EXPECT_NEAR(y[d + 1], p[1] * std::cos(0.01f) - p[3] * std::sin(0.01f), 1e-6);
  for (int i = r; i < d; ++i) EXPECT_FLOAT_EQ(y[d + i], p[i]);
  rope_backward(y.data(), b, t, h, d, r, 10000.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6);
}

TEST(Embedding, VocabShardsSumToTheFullTable) {
  const int n = 4, t = 2, c = 3, vocab = 6;
  const std::vector<int> tokens = {0, 5, 3, 2};
  const Vec wte = random(vocab * c, 21), wpe = random(t * c, 22);
  Vec full(n * c), lo(n * c), hi(n * c);
  embedding_forward(full.data(), tokens.data(), wte.data(), wpe.data(), n, t, c, 0, vocab, true);
  embedding_forward(lo.data(), tokens.data(), wte.data(), wpe.data(), n, t, c, 0, 3, true);
  embedding_forward(hi.data(), tokens.data(), wte.data() + 3 * c, wpe.data(), n, t, c, 3, 3, false);
  for (int i = 0; i < n * c; ++i) EXPECT_NEAR(lo[i] + hi[i], full[i], 1e-6);
  EXPECT_NEAR(full[c + 1], wte[5 * c + 1] + wpe[c + 1], 1e-6);  // token 5 at position 1
  Vec dwte(vocab * c), dwpe(t * c);
  const Vec dout = random(n * c, 23);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), n, t, c, 0, vocab);
  EXPECT_NEAR(dwte[5 * c], dout[c], 1e-7);
  EXPECT_NEAR(dwpe[0], dout[0] + dout[2 * c], 1e-6);  // tokens 0 and 2 sit at position 0
}

// Uniform logits give loss ln(V); two vocab shards combine to the single-rank loss and gradient.
TEST(CrossEntropy, UniformLogitsAndVocabParallelPieces) {
  const int n = 3, v = 8;
  const std::vector<int> targets = {1, 6, 3};
  Vec zero(n * v, 0.0f), mx(n), se(n), tl(n), loss(n);
  row_max(mx.data(), zero.data(), n, v);
  row_sum_exp_and_target(se.data(), tl.data(), zero.data(), mx.data(), targets.data(), n, v, 0);
  cross_entropy_loss(loss.data(), mx.data(), se.data(), tl.data(), n);
  for (float l : loss) EXPECT_NEAR(l, std::log(8.0f), 1e-6);

  const Vec logits = random(n * v, 24);
  auto single = [&](const Vec& lg) {
    Vec m(n), s(n), t(n), l(n);
    row_max(m.data(), lg.data(), n, v);
    row_sum_exp_and_target(s.data(), t.data(), lg.data(), m.data(), targets.data(), n, v, 0);
    cross_entropy_loss(l.data(), m.data(), s.data(), t.data(), n);
    return l;
  };
  const Vec ref = single(logits);
  // Two shards of 4 columns: max = max of maxes, sums and target logits add after rescaling.
  Vec a(n * 4), b(n * 4);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 4; ++j) a[i * 4 + j] = logits[i * v + j], b[i * 4 + j] = logits[i * v + 4 + j];
  Vec ma(n), mb(n), m(n), sa(n), sb(n), ta(n), tb(n), s(n), t(n), l(n);
  row_max(ma.data(), a.data(), n, 4);
  row_max(mb.data(), b.data(), n, 4);
  for (int i = 0; i < n; ++i) m[i] = std::max(ma[i], mb[i]);
  row_sum_exp_and_target(sa.data(), ta.data(), a.data(), m.data(), targets.data(), n, 4, 0);
  row_sum_exp_and_target(sb.data(), tb.data(), b.data(), m.data(), targets.data(), n, 4, 4);
  for (int i = 0; i < n; ++i) s[i] = sa[i] + sb[i], t[i] = ta[i] + tb[i];
  cross_entropy_loss(l.data(), m.data(), s.data(), t.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(l[i], ref[i], 1e-5);
  // Gradient of sum_i dloss_i * loss_i against finite differences.
  const Vec dloss = random(n, 25);
  Vec mm(n), ss(n), tt(n), dl(n * v);
  row_max(mm.data(), logits.data(), n, v);
  row_sum_exp_and_target(ss.data(), tt.data(), logits.data(), mm.data(), targets.data(), n, v, 0);
  cross_entropy_backward(dl.data(), logits.data(), mm.data(), ss.data(), targets.data(), dloss.data(), n, v, 0);
  expect_gradient(logits, dl, single, dloss);
}

// First step with g = 1 everywhere: m = 0.1, v = 0.05; bias-corrected mhat = 1, vhat = 1, so
// p -= lr (1 / (1 + eps) + wd p): 0.5 - 0.01 (0.99999999 + 0.05) = 0.4895.
TEST(AdamW, FirstStepByHand) {
  Vec p = {0.5f}, g = {1.0f}, m = {0.0f}, v = {0.0f};
  AdamWConfig cfg;
  cfg.lr = 0.01f;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.95f;
  cfg.weight_decay = 0.1f;
  adamw_update(p.data(), g.data(), m.data(), v.data(), 1, cfg, 1);
  EXPECT_NEAR(m[0], 0.1f, 1e-7);
  EXPECT_NEAR(v[0], 0.05f, 1e-7);
  EXPECT_NEAR(p[0], 0.5f - 0.01f * (1.0f / (1.0f + 1e-8f) + 0.1f * 0.5f), 1e-7);
}

}  // namespace
}  // namespace parallax::kernels

#include "kernels/cast.h"

namespace parallax::kernels {
namespace {

// bf16 keeps fp32's exponent and 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and
// rounds to the even one (1); 1 + 3 * 2^-8 rounds up to 1 + 2^-6. fp16: 65504 is the largest
// finite value, 65520 overflows; 2^-24 is the smallest subnormal; 1/3 -> 0.333251953125.
TEST(Cast, RoundToNearestEven) {
  const float in[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 65504.0f, 65520.0f, 5.9604645e-8f, 1.0f / 3};
  uint16_t b[7], h[7];
  float back[7];
  to_bf16(b, in, 7);
  from_bf16(back, b, 7);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 1.0f / 64);
  EXPECT_EQ(back[2], -2.5f);
  to_fp16(h, in, 7);
  from_fp16(back, h, 7);
  EXPECT_EQ(back[3], 65504.0f);
  EXPECT_TRUE(std::isinf(back[4]));
  EXPECT_EQ(back[5], 5.9604644775390625e-8f);
  EXPECT_EQ(back[6], 0.333251953125f);
  EXPECT_EQ(h[2], 0xC100);  // -2.5 = -1.25 * 2^1
}

// FP8 rounding by hand. E4M3 near 1 has spacing 2^-3: 1.0625 = 8.5 steps rounds to even, 1.0;
// 1.1875 = 9.5 steps to 10, 1.25; 500 saturates at 448; 2^-10 is half the smallest subnormal
// (2^-9) and rounds to even, 0; with scale 2, 0.59375 x 2 = 1.1875 -> 1.25 -> 0.625. E5M2 near 1
// has spacing 2^-2: 1.125 -> 1.0, 1.375 -> 1.5; 60000 saturates at 57,344.
TEST(Cast, Fp8RoundsToNearestEvenAndSaturates) {
  const float in[] = {1.0625f, 1.1875f, 500.0f, -500.0f, std::ldexp(1.0f, -10), 0.0f};
  float out[6];
  fp8_round(out, in, 6, 1.0f, Fp8Format::kE4M3);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.25f);
  EXPECT_FLOAT_EQ(out[2], 448.0f);
  EXPECT_FLOAT_EQ(out[3], -448.0f);
  EXPECT_FLOAT_EQ(out[4], 0.0f);
  EXPECT_FLOAT_EQ(out[5], 0.0f);
  const float scaled = 0.59375f;
  fp8_round(out, &scaled, 1, 2.0f, Fp8Format::kE4M3);
  EXPECT_FLOAT_EQ(out[0], 0.625f);
  const float e5[] = {1.125f, 1.375f, 60000.0f};
  fp8_round(out, e5, 3, 1.0f, Fp8Format::kE5M2);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.5f);
  EXPECT_FLOAT_EQ(out[2], 57344.0f);
}

TEST(Cast, OverflowCheckAndUnscale) {
  float g[] = {1.0f, 2.0f, 4.0f};
  EXPECT_FALSE(has_inf_or_nan(g, 3));
  unscale(g, 3, 4.0f);
  EXPECT_EQ(g[2], 1.0f);
  g[1] = INFINITY;
  EXPECT_TRUE(has_inf_or_nan(g, 3));
  g[1] = NAN;
  EXPECT_TRUE(has_inf_or_nan(g, 3));
}

}  // namespace
}  // namespace parallax::kernels
