#include "runtime/transformer.h"

#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "runtime/init.h"
#include "runtime/transformer_cache.h"

namespace parallax {

namespace {

constexpr float kInitStd = 0.02f;

void make(Param& p, const std::string& name, int64_t size, bool replicated, ParamRole role) {
  p.name = name;
  p.role = role;
  p.sp_partial = is_norm(role);  // norms see local tokens under SP
  p.size = size;
  p.value.assign(size, role == ParamRole::kNormWeight ? 1.0f : 0.0f);
  p.grad.assign(size, 0.0f);
  p.tp_replicated = replicated;
}

}  // namespace

int64_t padded_vocab(const ModelSpec& m) {
  constexpr int64_t kVocabMultiple = 128;
  return (m.vocab + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
}

Result<Transformer> Transformer::create(const ModelSpec& m, int tp, int tp_rank, uint64_t seed, int pp, int pp_rank,
                                        int chunks, const std::vector<Plan::LayerRange>& chunk_layers, int ep, int ep_rank) {
  Transformer t;
  t.m_ = m;
  if (m.experts % ep != 0) return Error{"ep " + std::to_string(ep) + " must divide the experts"};
  t.ep_ = ep;
  t.ep_rank_ = ep_rank;
  t.tp_ = tp;
  t.tp_rank_ = tp_rank;
  t.pp_ = pp;
  t.pp_rank_ = pp_rank;
  t.chunks_ = chunks;
  std::vector<Plan::LayerRange> ranges = chunk_layers;
  if (ranges.empty()) {
    if (m.layers % (static_cast<int64_t>(pp) * chunks) != 0)
      return Error{"num_layers " + std::to_string(m.layers) + " is not divisible by pp x chunks"};
    const int64_t per = m.layers / (static_cast<int64_t>(pp) * chunks);
    for (int c = 0; c < chunks; ++c) ranges.push_back({t.virtual_stage(c) * per, per});
  }
  if (static_cast<int>(ranges.size()) != chunks) return Error{"uneven layers need one range per chunk"};
  for (const Plan::LayerRange& r : ranges)
    if (r.first < 0 || r.count < 0 || r.first + r.count > m.layers) return Error{"a chunk's layers lie outside num_layers"};
  t.vocab_padded_ = parallax::padded_vocab(m);
  if (m.heads % tp || m.kv_heads % tp || m.ffn_hidden % tp || t.vocab_padded_ % tp)
    return Error{"tp " + std::to_string(tp) + " must divide the heads, KV heads, FFN size and padded vocabulary " +
                 std::to_string(t.vocab_padded_)};
  t.vocab_local_ = t.vocab_padded_ / tp;
  t.q_local_ = m.q_dim() / tp;
  t.kv_local_ = m.kv_dim() / tp;
  t.ffn_local_ = m.ffn_hidden / tp;
  t.fc1_local_ = (m.mlp == Mlp::kSwiGlu ? 2 : 1) * t.ffn_local_;
  t.rope_base_ = static_cast<float>(m.rope_theta);
  const int64_t h = m.hidden;
  const bool first = pp_rank == 0, last = pp_rank == pp - 1;
  if (first) {
    make(t.wte_, "wte", t.vocab_local_ * h, false, ParamRole::kEmbedding);
    fill_normal(t.wte_.value.data(), t.vocab_local_, h, tp_rank * t.vocab_local_, 0, h, seed, 1, kInitStd);
    if (m.positions == Positions::kLearned) {
      make(t.wpe_, "wpe", m.max_positions * h, true, ParamRole::kEmbedding);
      fill_normal(t.wpe_.value.data(), m.max_positions, h, 0, 0, h, seed, 2, kInitStd / 2);
    }
  }
  if (last) {
    make(t.lnf_w_, "lnf.w", h, true, ParamRole::kNormWeight);
    if (m.norm == Norm::kLayerNorm) make(t.lnf_b_, "lnf.b", h, true, ParamRole::kNormBias);
    // Untied: the output layer. Tied on several stages: a copy of the embedding (tensor id 1).
    if (!m.tied_embeddings || pp > 1) {
      make(t.head_, m.tied_embeddings ? "wte.copy" : "head", t.vocab_local_ * h, false, ParamRole::kEmbedding);
      fill_normal(t.head_.value.data(), t.vocab_local_, h, tp_rank * t.vocab_local_, 0, h, seed,
                  m.tied_embeddings ? 1 : 3, kInitStd);
    }
  }
  t.layers_.resize(chunks);
  for (int c = 0; c < chunks; ++c) {
    t.layers_[c].resize(static_cast<size_t>(ranges[c].count));
    for (int64_t l = 0; l < ranges[c].count; ++l) t.init_layer(t.layers_[c][l], ranges[c].first + l, seed);
  }
  t.describe_shards();
  return t;
}

bool Transformer::recomputes_layer(int64_t index, double full_fraction) {
  auto below = [&](int64_t i) { return std::floor(static_cast<double>(i) * full_fraction + 0.5); };
  return full_fraction >= 1 || below(index) < below(index + 1);
}

void Transformer::set_recompute(Recompute r, double full_fraction) {
  recompute_ = r;
  for (auto& chunk : layers_)
    for (Layer& L : chunk) L.recomputes = recomputes_layer(L.index, full_fraction);
}

void Transformer::init_layer(Layer& L, int64_t index, uint64_t seed) {
  L.index = index;
  const int64_t h = m_.hidden, q = m_.q_dim(), kv = m_.kv_dim(), f = m_.ffn_hidden;
  const std::string n = "layer" + std::to_string(index) + ".";
  const uint64_t id = 100 + 16 * static_cast<uint64_t>(index);
  const bool ln = m_.norm == Norm::kLayerNorm;
  const float out_std = kInitStd / std::sqrt(2.0f * static_cast<float>(m_.layers));  // GPT-2's residual scaling
  make(L.ln1_w, n + "ln1.w", h, true, ParamRole::kNormWeight);
  make(L.ln2_w, n + "ln2.w", h, true, ParamRole::kNormWeight);
  if (ln) make(L.ln1_b, n + "ln1.b", h, true, ParamRole::kNormBias), make(L.ln2_b, n + "ln2.b", h, true, ParamRole::kNormBias);
  // QKV: this rank's rows of the Q, K and V blocks of the full [q + 2 kv, h] weight.
  make(L.qkv_w, n + "qkv.w", (q_local_ + 2 * kv_local_) * h, false, ParamRole::kMatrix);
  float* w = L.qkv_w.value.data();
  fill_normal(w, q_local_, h, tp_rank_ * q_local_, 0, h, seed, id, kInitStd);
  fill_normal(w + q_local_ * h, kv_local_, h, q + tp_rank_ * kv_local_, 0, h, seed, id, kInitStd);
  fill_normal(w + (q_local_ + kv_local_) * h, kv_local_, h, q + kv + tp_rank_ * kv_local_, 0, h, seed, id, kInitStd);
  if (m_.has_qkv_bias()) make(L.qkv_b, n + "qkv.b", q_local_ + 2 * kv_local_, false, ParamRole::kBias);
  // Attention output: this rank's columns of the full [h, q] weight.
  make(L.proj_w, n + "proj.w", h * q_local_, false, ParamRole::kMatrix);
  fill_normal(L.proj_w.value.data(), h, q_local_, 0, tp_rank_ * q_local_, q, seed, id + 1, out_std);
  if (m_.has_o_bias()) make(L.proj_b, n + "proj.b", h, true, ParamRole::kBias);
  if (m_.is_moe()) return init_experts(L, n, index, seed);
  // FC1: this rank's rows (for SwiGLU, of the gate block and of the up block).
  make(L.fc1_w, n + "fc1.w", fc1_local_ * h, false, ParamRole::kMatrix);
  fill_normal(L.fc1_w.value.data(), ffn_local_, h, tp_rank_ * ffn_local_, 0, h, seed, id + 2, kInitStd);
  if (m_.mlp == Mlp::kSwiGlu)
    fill_normal(L.fc1_w.value.data() + ffn_local_ * h, ffn_local_, h, f + tp_rank_ * ffn_local_, 0, h, seed, id + 2, kInitStd);
  if (m_.has_mlp_bias()) make(L.fc1_b, n + "fc1.b", fc1_local_, false, ParamRole::kBias);
  make(L.fc2_w, n + "fc2.w", h * ffn_local_, false, ParamRole::kMatrix);
  fill_normal(L.fc2_w.value.data(), h, ffn_local_, 0, tp_rank_ * ffn_local_, f, seed, id + 3, out_std);
  if (m_.has_mlp_bias()) make(L.fc2_b, n + "fc2.b", h, true, ParamRole::kBias);
}

std::vector<Param*> Transformer::Layer::params() {
  std::vector<Param*> out;
  for (Param* p : {&ln1_w, &ln1_b, &qkv_w, &qkv_b, &proj_w, &proj_b, &ln2_w, &ln2_b, &fc1_w, &fc1_b, &fc2_w, &fc2_b, &router})
    if (!p->empty()) out.push_back(p);
  for (size_t e = 0; e < expert_fc1.size(); ++e) out.push_back(&expert_fc1[e]), out.push_back(&expert_fc2[e]);
  return out;
}

std::vector<Param*> Transformer::params() {
  std::vector<Param*> out;
  for (Param* p : {&wte_, &wpe_, &lnf_w_, &lnf_b_, &head_})
    if (!p->empty()) out.push_back(p);
  for (auto& chunk : layers_)
    for (Layer& L : chunk)
      for (Param* p : L.params()) out.push_back(p);
  return out;
}

std::vector<Param*> Transformer::chunk_params(int chunk) {
  std::vector<Param*> out;
  auto add = [&](Param* p) {
    if (!p->empty()) out.push_back(p);
  };
  if (first_stage(chunk)) add(&wte_), add(&wpe_);
  for (Layer& L : layers_[chunk])
    for (Param* p : L.params()) add(p);
  if (last_stage(chunk)) add(&lnf_w_), add(&lnf_b_), add(&head_);
  return out;
}

double Transformer::forward(int chunk, const int* tokens, const int* targets, const float* input, float* output, int b,
                            int s, float loss_weight, Communicator& tp, MicroBatch& state) {
  const int n = b * s;
  const int64_t h = m_.hidden;
  Buffer x(n * h);
  const int64_t local = static_cast<int64_t>(local_tokens(n)) * h;
  if (first_stage(chunk)) {
    const int vocab_start = static_cast<int>(tp_rank_ * vocab_local_);
    state.tokens.assign(tokens, tokens + n);
    Buffer partial(n * h);
    kernels::embedding_forward(partial.data(), tokens, wte_.value.data(), wpe_.empty() ? nullptr : wpe_.value.data(), n,
                               s, static_cast<int>(h), vocab_start, static_cast<int>(vocab_local_), tp_rank_ == 0);
    reduce_tokens(x.data(), partial.data(), n, tp);  // vocab-parallel partial sums
  } else {
    std::copy(input, input + local, x.begin());
  }
  std::vector<Layer>& layers = layers_[chunk];
  state.layers.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    layer_forward(layers[l], state.layers[l], x.data(), b, s, tp);
    drop_for_recompute(layers[l], state.layers[l]);
  }
  if (!last_stage(chunk)) {
    std::copy(x.begin(), x.begin() + local, output);
    return 0;
  }
  state.dhead.assign(local, 0.0f);
  return head_forward_backward(x.data(), state.dhead.data(), targets, n, loss_weight, tp);
}

void Transformer::backward(int chunk, const float* dout, float* dinput, int b, int s, Communicator& tp, MicroBatch& state) {
  const int n = b * s;
  const int64_t h = m_.hidden;
  const int64_t local = static_cast<int64_t>(local_tokens(n)) * h;
  Buffer dx = last_stage(chunk) ? std::move(state.dhead) : Buffer(dout, dout + local);
  WeightGradients* later = split_weight_gradients_ ? &state.weight_gradients : nullptr;
  std::vector<Layer>& layers = layers_[chunk];
  for (size_t l = layers.size(); l-- > 0;) {
    recompute(layers[l], state.layers[l], b, s, tp);
    layer_backward(layers[l], state.layers[l], dx.data(), b, s, tp, later);
    state.layers[l] = Cache{};
  }
  state.layers.clear();
  if (!first_stage(chunk)) {
    std::copy(dx.begin(), dx.begin() + local, dinput);
    return;
  }
  Buffer dx_full(n * h);
  gather_tokens(dx_full.data(), dx.data(), n, tp);
  if (later) state.dembedding.swap(dx_full);
  else embedding_gradient(dx_full.data(), state.tokens.data(), n, s);
}

void Transformer::weight_backward(int chunk, int b, int s, MicroBatch& state) {
  for (const WeightGradient& g : state.weight_gradients) accumulate(g);
  if (first_stage(chunk) && !state.dembedding.empty())
    embedding_gradient(state.dembedding.data(), state.tokens.data(), b * s, s);
  state = MicroBatch{};
}

void Transformer::embedding_gradient(const float* dx_full, const int* tokens, int n, int s) {
  kernels::embedding_backward(wte_.grad.data(), wpe_.empty() ? nullptr : wpe_.grad.data(), dx_full, tokens, n, s,
                              static_cast<int>(m_.hidden), static_cast<int>(tp_rank_ * vocab_local_),
                              static_cast<int>(vocab_local_));
}

double Transformer::forward_backward(const int* inputs, const int* targets, int b, int s, float loss_weight,
                                     Communicator& tp) {
  MicroBatch state;
  const double loss = forward(0, inputs, targets, nullptr, nullptr, b, s, loss_weight, tp, state);
  backward(0, nullptr, nullptr, b, s, tp, state);
  if (split_weight_gradients_) weight_backward(0, b, s, state);
  return loss;
}

// Final norm, output layer and vocab-parallel cross-entropy, forward and backward.
double Transformer::head_forward_backward(const float* x, float* dx, const int* targets, int n, float loss_weight,
                                          Communicator& tp) {
  const int h = static_cast<int>(m_.hidden), v = static_cast<int>(vocab_local_);
  const int vocab_start = static_cast<int>(tp_rank_ * vocab_local_);
  Param& head = head_.empty() ? wte_ : head_;
  const int nl = local_tokens(n);
  Buffer xf_local(static_cast<int64_t>(nl) * h), xf(static_cast<int64_t>(n) * h), sa(nl), sb(nl),
      logits(static_cast<size_t>(n) * v), stats(2 * n), mx(n), loss(n), dloss(n, loss_weight);
  norm_forward(lnf_w_, lnf_b_, xf_local.data(), sa.data(), sb.data(), x, nl);
  gather_tokens(xf.data(), xf_local.data(), n, tp);
  kernels::matmul_forward(logits.data(), xf.data(), head.value.data(), nullptr, n, h, v);
  kernels::row_max(mx.data(), logits.data(), n, v);
  tp.all_reduce(mx.data(), n, ReduceOp::kMax);
  kernels::row_sum_exp_and_target(stats.data(), stats.data() + n, logits.data(), mx.data(), targets, n, v, vocab_start);
  tp.all_reduce(stats.data(), 2 * n, ReduceOp::kSum);
  kernels::cross_entropy_loss(loss.data(), mx.data(), stats.data(), stats.data() + n, n);
  double total = 0;
  for (float l : loss) total += l;
  kernels::cross_entropy_backward(logits.data(), logits.data(), mx.data(), stats.data(), targets, dloss.data(), n, v,
                                  vocab_start);
  Buffer dxf(static_cast<int64_t>(n) * h, 0.0f);
  kernels::matmul_backward(dxf.data(), head.grad.data(), nullptr, logits.data(), xf.data(), head.value.data(), n, h, v);
  reduce_tokens(xf_local.data(), dxf.data(), n, tp);  // vocab-parallel: partial input gradients
  norm_backward(lnf_w_, lnf_b_, dx, xf_local.data(), x, sa.data(), sb.data(), nl);
  return total;
}

}  // namespace parallax
