// One transformer layer's forward and backward on this rank's TP shard.
#include <algorithm>
#include <cmath>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "runtime/transformer_cache.h"

namespace parallax {

namespace {

void add(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
void add_bias(float* x, const Param& bias, int64_t rows, int64_t cols) {
  if (bias.empty()) return;
  for (int64_t r = 0; r < rows; ++r) add(x + r * cols, bias.value.data(), cols);
}
const float* or_null(const Param& p) { return p.empty() ? nullptr : p.value.data(); }
float* grad_or_null(Param& p) { return p.empty() ? nullptr : p.grad.data(); }

// Copies columns [col, col + width) of each row of a rows x stride array into dst (rows x width),
// or back when `scatter`.
void columns(float* dst, float* src, int64_t rows, int64_t stride, int64_t col, int64_t width, bool scatter) {
  for (int64_t r = 0; r < rows; ++r) {
    float* a = src + r * stride + col;
    float* b = dst + r * width;
    if (scatter) std::copy(b, b + width, a);
    else std::copy(a, a + width, b);
  }
}

}  // namespace

void Transformer::norm_forward(const Param& w, const Param& b, float* out, float* stat_a, float* stat_b,
                               const float* in, int n) const {
  const int h = static_cast<int>(m_.hidden);
  if (m_.norm == Norm::kLayerNorm) kernels::layernorm_forward(out, stat_a, stat_b, in, w.value.data(), or_null(b), n, h, eps());
  else kernels::rmsnorm_forward(out, stat_a, in, w.value.data(), n, h, eps());
}

void Transformer::norm_backward(Param& w, Param& b, float* din, const float* dout, const float* in, const float* stat_a,
                                const float* stat_b, int n, WeightGradients* later) const {
  const int h = static_cast<int>(m_.hidden);
  const bool ln = m_.norm == Norm::kLayerNorm;
  float* dw = later ? nullptr : w.grad.data();
  float* db = later ? nullptr : grad_or_null(b);
  if (ln) kernels::layernorm_backward(din, dw, db, dout, in, w.value.data(), stat_a, stat_b, n, h);
  else kernels::rmsnorm_backward(din, dw, dout, in, w.value.data(), stat_a, n, h);
  if (!later) return;
  const int64_t size = static_cast<int64_t>(n) * h;
  WeightGradient g{true, &w, b.empty() ? nullptr : &b, Buffer(in, in + size), Buffer(dout, dout + size),
                   Buffer(stat_a, stat_a + n), ln ? Buffer(stat_b, stat_b + n) : Buffer(), n, h, h};
  later->push_back(std::move(g));
}

void Transformer::linear_backward(float* dinp, Param& w, Param* b, const float* dout, const float* x,
                                  const float* weight, int n, int c, int oc, WeightGradients* later) const {
  Param* bias = b && !b->empty() ? b : nullptr;
  if (!later) {
    kernels::matmul_backward(dinp, w.grad.data(), bias ? bias->grad.data() : nullptr, dout, x, weight, n, c, oc);
    return;
  }
  kernels::matmul_backward(dinp, nullptr, nullptr, dout, x, weight, n, c, oc);
  WeightGradient g{false, &w, bias, Buffer(x, x + static_cast<int64_t>(n) * c),
                   Buffer(dout, dout + static_cast<int64_t>(n) * oc), Buffer(), Buffer(), n, c, oc};
  later->push_back(std::move(g));
}

// W reads no parameter values: the kernels read the weight only for the input gradient.
void Transformer::accumulate(const WeightGradient& g) const {
  float* db = g.bias ? g.bias->grad.data() : nullptr;
  if (!g.norm) {
    kernels::matmul_backward(nullptr, g.weight->grad.data(), db, g.dout.data(), g.x.data(), nullptr, g.rows, g.cols,
                             g.outputs);
  } else if (m_.norm == Norm::kLayerNorm) {
    kernels::layernorm_backward(nullptr, g.weight->grad.data(), db, g.dout.data(), g.x.data(), nullptr, g.stat_a.data(),
                                g.stat_b.data(), g.rows, g.cols);
  } else {
    kernels::rmsnorm_backward(nullptr, g.weight->grad.data(), g.dout.data(), g.x.data(), nullptr, g.stat_a.data(),
                              g.rows, g.cols);
  }
}

// Without SP a layer's residual stream is replicated over TP: gathering is a copy and the
// row-parallel partial sums are all-reduced. With SP each rank holds n / t of the tokens: the
// stream is all-gathered before the column-parallel GEMMs and reduce-scattered after the
// row-parallel ones (Korthikanti et al.), moving the same bytes.
void Transformer::gather_tokens(float* full, const float* local, int n, Communicator& tp) const {
  const int64_t h = m_.hidden;
  if (sequence_parallel_) tp.all_gather(full, local, n / tp_ * h);
  else std::copy(local, local + n * h, full);
}

void Transformer::reduce_tokens(float* local, float* full, int n, Communicator& tp) const {
  const int64_t h = m_.hidden;
  if (sequence_parallel_) {
    tp.reduce_scatter(local, full, n / tp_ * h);
  } else {
    tp.all_reduce(full, n * h, ReduceOp::kSum);
    std::copy(full, full + n * h, local);
  }
}

void Transformer::set_context_parallel(int cp, int cp_rank, int seq_len, Communicator* comm, bool ring) {
  cp_ = cp, cp_rank_ = cp_rank, cp_comm_ = comm, cp_ring_ = ring;
  positions_.clear();
  if (cp <= 1) return;
  const int chunk = seq_len / (2 * cp);
  for (int half : {cp_rank, 2 * cp - 1 - cp_rank})
    for (int i = 0; i < chunk; ++i) positions_.push_back(half * chunk + i);
}

const float* Transformer::gemm_operand(Buffer& keep, const float* x, int64_t n, bool gradient, Communicator& tp) const {
  if (!fp8_) return x;
  const kernels::Fp8Format f = gradient ? kernels::Fp8Format::kE5M2 : kernels::Fp8Format::kE4M3;
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  tp.all_reduce(&amax, 1, ReduceOp::kMax);  // one scale for the whole tensor, as one rank would have
  if (cp_ > 1) cp_comm_->all_reduce(&amax, 1, ReduceOp::kMax);
  keep.resize(n);
  kernels::fp8_round(keep.data(), x, static_cast<long>(n), amax > 0 ? kernels::fp8_max(f) / amax : 1.0f, f);
  return keep.data();
}

kernels::AttentionShape Transformer::attention_shape(int b, int s) const {
  kernels::AttentionShape a{b, s, static_cast<int>(m_.heads / tp_), static_cast<int>(m_.kv_heads / tp_),
                            static_cast<int>(m_.head_dim)};
  if (cp_ > 1) a.t = s * cp_, a.tq = s, a.q_pos = positions_.data();
  return a;
}

namespace {
constexpr int kRingTag = 7101;

// Every rank's block into `all` (rank order) over cp - 1 ring steps: each passes on the block it
// received last to the next rank.
void ring_gather(Communicator& c, float* all, const float* mine, int64_t block) {
  const int n = c.size(), me = c.rank();
  std::copy(mine, mine + block, all + me * block);
  for (int step = 0, have = me; step < n - 1; ++step) {
    const int from = (have - 1 + n) % n;
    c.send_async(all + have * block, block, (me + 1) % n, kRingTag);
    c.recv(all + from * block, block, (me - 1 + n) % n, kRingTag);
    c.wait_sends();
    have = from;
  }
}

// Rank r's block of the sum over ranks of `all` into `out`: cp - 1 ring steps, each adding this
// rank's part of the block passing through.
void ring_reduce_scatter(Communicator& c, float* out, const float* all, int64_t block) {
  const int n = c.size(), me = c.rank();
  Buffer acc(all + ((me - 1 + n) % n) * block, all + ((me - 1 + n) % n + 1) * block), in(block);
  for (int step = 0; step < n - 1; ++step) {
    c.send_async(acc.data(), block, (me + 1) % n, kRingTag);
    c.recv(in.data(), block, (me - 1 + n) % n, kRingTag);
    c.wait_sends();
    const float* own = all + ((me - step - 2 + 2 * n) % n) * block;
    for (int64_t i = 0; i < block; ++i) acc[i] = in[i] + own[i];
  }
  std::copy(acc.begin(), acc.end(), out);
}
// Calls f(offset in the blocks, offset in the sequences, count) for each half-chunk of CP's layout:
// `blocks` holds every CP rank's s local rows of b sequences in rank order, the sequences are
// whole and in order, and rank r holds chunks r and 2 cp - 1 - r.
template <typename F>
void for_each_context_half(int cp, int b, int s, int width, F f) {
  const int64_t block = static_cast<int64_t>(b) * s * width, half = static_cast<int64_t>(s / 2) * width;
  for (int r = 0; r < cp; ++r)
    for (int bi = 0; bi < b; ++bi)
      for (int k = 0; k < 2; ++k)
        f(r * block + bi * static_cast<int64_t>(s) * width + k * half,
          static_cast<int64_t>(bi) * cp * s * width + (k == 0 ? r : 2 * cp - 1 - r) * half, half);
}
}  // namespace

void Transformer::gather_context(Buffer& full, const Buffer& local, int b, int s, int width) const {
  const int64_t block = static_cast<int64_t>(b) * s * width;
  Buffer all(block * cp_);
  if (cp_ring_) ring_gather(*cp_comm_, all.data(), local.data(), block);
  else cp_comm_->all_gather(all.data(), local.data(), block);
  full.resize(block * cp_);
  for_each_context_half(cp_, b, s, width, [&](int64_t in_blocks, int64_t in_sequence, int64_t n) {
    std::copy(all.data() + in_blocks, all.data() + in_blocks + n, full.data() + in_sequence);
  });
}

void Transformer::scatter_context(Buffer& local, const Buffer& full, int b, int s, int width) const {
  const int64_t block = static_cast<int64_t>(b) * s * width;
  Buffer all(block * cp_);
  for_each_context_half(cp_, b, s, width, [&](int64_t in_blocks, int64_t in_sequence, int64_t n) {
    std::copy(full.data() + in_sequence, full.data() + in_sequence + n, all.data() + in_blocks);
  });
  local.resize(block);
  if (cp_ring_) ring_reduce_scatter(*cp_comm_, local.data(), all.data(), block);
  else cp_comm_->reduce_scatter(local.data(), all.data(), block);
}

void Transformer::layer_forward(Layer& L, Cache& c, float* x, int b, int s, Communicator& tp) const {
  const int n = b * s, h = static_cast<int>(m_.hidden), hd = static_cast<int>(m_.head_dim);
  const int nl = local_tokens(n);
  const int ql = static_cast<int>(q_local_), kvl = static_cast<int>(kv_local_), width = ql + 2 * kvl;
  const int heads = static_cast<int>(m_.heads / tp_), kv_heads = static_cast<int>(m_.kv_heads / tp_);
  const int64_t local = static_cast<int64_t>(nl) * h, full = static_cast<int64_t>(n) * h;
  c.x.assign(x, x + local);
  c.n1a.resize(nl), c.n1b.resize(nl), c.a.resize(local);
  norm_forward(L.ln1_w, L.ln1_b, c.a.data(), c.n1a.data(), c.n1b.data(), x, nl);
  Buffer a_full(full), qkv(static_cast<int64_t>(n) * width);
  gather_tokens(a_full.data(), c.a.data(), n, tp);
  Buffer fx, fw;  // FP8: the rounded operands
  kernels::matmul_forward(qkv.data(), gemm_operand(fx, a_full.data(), full, false, tp),
                          gemm_operand(fw, L.qkv_w.value.data(), L.qkv_w.size, false, tp), or_null(L.qkv_b), n, h, width);
  c.q.resize(static_cast<int64_t>(n) * ql), c.k.resize(static_cast<int64_t>(n) * kvl), c.v.resize(c.k.size());
  columns(c.q.data(), qkv.data(), n, width, 0, ql, false);
  columns(c.k.data(), qkv.data(), n, width, ql, kvl, false);
  columns(c.v.data(), qkv.data(), n, width, ql + kvl, kvl, false);
  const int rot = static_cast<int>(m_.rotary_dims);
  const int* pos = cp_ > 1 ? positions_.data() : nullptr;
  if (m_.positions == Positions::kRotary) {
    kernels::rope_forward(c.q.data(), b, s, heads, hd, rot, rope_base_, pos);
    kernels::rope_forward(c.k.data(), b, s, kv_heads, hd, rot, rope_base_, pos);
  }
  if (cp_ > 1) {  // the local queries attend to the whole sequence's keys and values
    Buffer k_full, v_full;
    gather_context(k_full, c.k, b, s, kvl), gather_context(v_full, c.v, b, s, kvl);
    c.k.swap(k_full), c.v.swap(v_full);
  }
  const kernels::AttentionShape shape = attention_shape(b, s);
  c.probs.resize(static_cast<int64_t>(b) * heads * shape.queries() * shape.t), c.o.resize(c.q.size());
  kernels::attention_forward(c.o.data(), c.probs.data(), c.q.data(), c.k.data(), c.v.data(), shape);
  Buffer y(full), y_local(local);
  kernels::matmul_forward(y.data(), gemm_operand(fx, c.o.data(), static_cast<int64_t>(c.o.size()), false, tp),
                          gemm_operand(fw, L.proj_w.value.data(), L.proj_w.size, false, tp), nullptr, n, ql, h);
  reduce_tokens(y_local.data(), y.data(), n, tp);
  add_bias(y_local.data(), L.proj_b, nl, h);
  add(x, y_local.data(), local);
  c.x1.assign(x, x + local);
  c.n2a.resize(nl), c.n2b.resize(nl), c.a2.resize(local);
  norm_forward(L.ln2_w, L.ln2_b, c.a2.data(), c.n2a.data(), c.n2b.data(), x, nl);
  gather_tokens(a_full.data(), c.a2.data(), n, tp);
  if (m_.is_moe()) moe_forward(L, c, a_full.data(), y.data(), n, tp);
  else mlp_forward(L, c, a_full.data(), y.data(), n, tp);
  reduce_tokens(y_local.data(), y.data(), n, tp);
  add_bias(y_local.data(), L.fc2_b, nl, h);
  add(x, y_local.data(), local);
}

void Transformer::mlp_forward(Layer& L, Cache& c, const float* a, float* y, int n, Communicator& tp) const {
  const int h = static_cast<int>(m_.hidden), fl = static_cast<int>(ffn_local_), f1 = static_cast<int>(fc1_local_);
  Buffer fx, fw;
  c.u.resize(static_cast<int64_t>(n) * f1), c.g.resize(static_cast<int64_t>(n) * fl);
  kernels::matmul_forward(c.u.data(), gemm_operand(fx, a, static_cast<int64_t>(n) * h, false, tp),
                          gemm_operand(fw, L.fc1_w.value.data(), L.fc1_w.size, false, tp), or_null(L.fc1_b), n, h, f1);
  if (m_.mlp == Mlp::kSwiGlu) kernels::swiglu_forward(c.g.data(), c.u.data(), n, fl);
  else if (m_.mlp == Mlp::kSquaredRelu) kernels::relu2_forward(c.g.data(), c.u.data(), static_cast<long>(c.u.size()));
  else kernels::gelu_forward(c.g.data(), c.u.data(), static_cast<long>(c.u.size()));
  kernels::matmul_forward(y, gemm_operand(fx, c.g.data(), static_cast<int64_t>(c.g.size()), false, tp),
                          gemm_operand(fw, L.fc2_w.value.data(), L.fc2_w.size, false, tp), nullptr, n, fl, h);
}

void Transformer::mlp_backward(Layer& L, Cache& c, const float* dy, float* a, float* da, int n, Communicator& tp,
                               WeightGradients* later) const {
  const int h = static_cast<int>(m_.hidden), fl = static_cast<int>(ffn_local_), f1 = static_cast<int>(fc1_local_);
  Buffer dg(static_cast<int64_t>(n) * fl, 0.0f), du(static_cast<int64_t>(n) * f1, 0.0f), fd, fx, fw;
  linear_backward(dg.data(), L.fc2_w, &L.fc2_b, gemm_operand(fd, dy, static_cast<int64_t>(n) * h, true, tp),
                  gemm_operand(fx, c.g.data(), static_cast<int64_t>(c.g.size()), false, tp),
                  gemm_operand(fw, L.fc2_w.value.data(), L.fc2_w.size, false, tp), n, fl, h, later);
  if (m_.mlp == Mlp::kSwiGlu) kernels::swiglu_backward(du.data(), c.u.data(), dg.data(), n, fl);
  else if (m_.mlp == Mlp::kSquaredRelu) kernels::relu2_backward(du.data(), c.u.data(), dg.data(), static_cast<long>(du.size()));
  else kernels::gelu_backward(du.data(), c.u.data(), dg.data(), static_cast<long>(du.size()));
  gather_tokens(a, c.a2.data(), n, tp);
  linear_backward(da, L.fc1_w, &L.fc1_b, gemm_operand(fd, du.data(), static_cast<int64_t>(du.size()), true, tp),
                  gemm_operand(fx, a, static_cast<int64_t>(n) * h, false, tp),
                  gemm_operand(fw, L.fc1_w.value.data(), L.fc1_w.size, false, tp), n, h, f1, later);
}

void Transformer::drop_for_recompute(const Layer& L, Cache& c) const {
  if (recompute_ == Recompute::kSelective) Buffer().swap(c.probs);
  if (recompute_ != Recompute::kFull || !L.recomputes) return;
  Buffer input;
  input.swap(c.x);
  c = Cache{};
  c.x.swap(input);
}

void Transformer::recompute(Layer& L, Cache& c, int b, int s, Communicator& tp) const {
  if (recompute_ == Recompute::kFull && L.recomputes) {
    Buffer x(c.x.begin(), c.x.end());
    layer_forward(L, c, x.data(), b, s, tp);  // issues the same TP collectives on every rank
  } else if (recompute_ == Recompute::kSelective) {
    const kernels::AttentionShape shape = attention_shape(b, s);
    c.probs.resize(static_cast<int64_t>(b) * shape.h * shape.queries() * shape.t);
    Buffer o(c.o.size());
    kernels::attention_forward(o.data(), c.probs.data(), c.q.data(), c.k.data(), c.v.data(), shape);
  }
}

void Transformer::layer_backward(Layer& L, Cache& c, float* dx, int b, int s, Communicator& tp,
                                 WeightGradients* later) const {
  const int n = b * s, h = static_cast<int>(m_.hidden), hd = static_cast<int>(m_.head_dim);
  const int nl = local_tokens(n);
  const int ql = static_cast<int>(q_local_), kvl = static_cast<int>(kv_local_), width = ql + 2 * kvl;
  const int heads = static_cast<int>(m_.heads / tp_), kv_heads = static_cast<int>(m_.kv_heads / tp_);
  const int64_t full = static_cast<int64_t>(n) * h;
  // MLP: dx is the gradient of the layer output = of the FC2 output and of the residual.
  Buffer dy(full), a_full(full), da(full, 0.0f), da_local(static_cast<int64_t>(nl) * h);
  gather_tokens(dy.data(), dx, n, tp);
  if (m_.is_moe()) moe_backward(L, c, dy.data(), a_full.data(), da.data(), n, tp, later);
  else mlp_backward(L, c, dy.data(), a_full.data(), da.data(), n, tp, later);
  reduce_tokens(da_local.data(), da.data(), n, tp);  // column-parallel: partial input gradients
  Buffer fd, fx, fw;  // FP8: the rounded operands
  norm_backward(L.ln2_w, L.ln2_b, dx, da_local.data(), c.x1.data(), c.n2a.data(), c.n2b.data(), nl, later);
  // Attention: dx is now the gradient of x1 = of the projection output and of the residual.
  Buffer d_o(c.o.size(), 0.0f), dq(c.q.size(), 0.0f), dk(c.k.size(), 0.0f), dv(c.v.size(), 0.0f);
  gather_tokens(dy.data(), dx, n, tp);
  linear_backward(d_o.data(), L.proj_w, &L.proj_b, gemm_operand(fd, dy.data(), full, true, tp),
                  gemm_operand(fx, c.o.data(), static_cast<int64_t>(c.o.size()), false, tp),
                  gemm_operand(fw, L.proj_w.value.data(), L.proj_w.size, false, tp), n, ql, h, later);
  kernels::attention_backward(dq.data(), dk.data(), dv.data(), d_o.data(), c.q.data(), c.k.data(), c.v.data(), c.probs.data(),
                              attention_shape(b, s));
  if (cp_ > 1) {  // every rank's queries contributed to these keys' gradients: summed to their owner
    Buffer dk_local, dv_local;
    scatter_context(dk_local, dk, b, s, kvl), scatter_context(dv_local, dv, b, s, kvl);
    dk.swap(dk_local), dv.swap(dv_local);
  }
  const int rot = static_cast<int>(m_.rotary_dims);
  const int* pos = cp_ > 1 ? positions_.data() : nullptr;
  if (m_.positions == Positions::kRotary) {
    kernels::rope_backward(dq.data(), b, s, heads, hd, rot, rope_base_, pos);
    kernels::rope_backward(dk.data(), b, s, kv_heads, hd, rot, rope_base_, pos);
  }
  Buffer dqkv(static_cast<int64_t>(n) * width);
  columns(dq.data(), dqkv.data(), n, width, 0, ql, true);
  columns(dk.data(), dqkv.data(), n, width, ql, kvl, true);
  columns(dv.data(), dqkv.data(), n, width, ql + kvl, kvl, true);
  std::fill(da.begin(), da.end(), 0.0f);
  gather_tokens(a_full.data(), c.a.data(), n, tp);
  linear_backward(da.data(), L.qkv_w, &L.qkv_b, gemm_operand(fd, dqkv.data(), static_cast<int64_t>(dqkv.size()), true, tp),
                  gemm_operand(fx, a_full.data(), full, false, tp),
                  gemm_operand(fw, L.qkv_w.value.data(), L.qkv_w.size, false, tp), n, h, width, later);
  reduce_tokens(da_local.data(), da.data(), n, tp);
  norm_backward(L.ln1_w, L.ln1_b, dx, da_local.data(), c.x.data(), c.n1a.data(), c.n1b.data(), nl, later);
}

}  // namespace parallax
