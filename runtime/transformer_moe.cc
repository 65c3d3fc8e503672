// A mixture-of-experts MLP (Mixtral's): a router, top-k routing and SwiGLU experts, with expert
// parallelism — each routed copy of a token travels to the EP rank holding its expert and the
// expert's output travels back, over point-to-point messages of the EP communicator. Each expert
// is split over TP exactly as the dense MLP is; every TP rank of an EP group routes the same
// (TP-gathered) tokens, so the partial outputs sum over TP as the dense MLP's do.
#include <algorithm>
#include <cmath>

#include "kernels/activation.h"
#include "kernels/matmul.h"
#include "runtime/init.h"
#include "runtime/transformer_cache.h"

namespace parallax {

namespace {

constexpr float kInitStd = 0.02f;
constexpr int kCountTag = 7001, kRowTag = 7002;

void make_param(Param& p, const std::string& name, int64_t size, bool replicated, bool expert) {
  p.name = name;
  p.role = ParamRole::kMatrix;
  p.size = size;
  p.value.assign(size, 0.0f);
  p.grad.assign(size, 0.0f);
  p.tp_replicated = replicated;
  p.expert = expert;
}

// The k largest of `p` (E values), ties to the lower index.
void top_k(int* out, const float* p, int experts, int k) {
  std::vector<int> order(experts);
  for (int e = 0; e < experts; ++e) order[e] = e;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

void Transformer::init_experts(Layer& L, const std::string& name, int64_t index, uint64_t seed) {
  const int64_t h = m_.hidden, f = m_.ffn_hidden, local = m_.experts / ep_;
  const float out_std = kInitStd / std::sqrt(2.0f * static_cast<float>(m_.layers));
  // Tensor ids apart from the dense layers' (100 + 16 L + 0..3): a router and two per expert.
  const uint64_t id = 1'000'000 + 4096 * static_cast<uint64_t>(index);
  make_param(L.router, name + "router.w", m_.experts * h, true, false);
  fill_normal(L.router.value.data(), m_.experts, h, 0, 0, h, seed, id, kInitStd);
  L.expert_fc1.resize(local), L.expert_fc2.resize(local);
  for (int64_t le = 0; le < local; ++le) {
    const int64_t e = ep_rank_ * local + le;
    const std::string n = name + "expert" + std::to_string(e) + ".";
    Param& fc1 = L.expert_fc1[le];
    make_param(fc1, n + "fc1.w", fc1_local_ * h, false, ep_ > 1);
    fill_normal(fc1.value.data(), ffn_local_, h, tp_rank_ * ffn_local_, 0, h, seed, id + 1 + 2 * e, kInitStd);
    fill_normal(fc1.value.data() + ffn_local_ * h, ffn_local_, h, f + tp_rank_ * ffn_local_, 0, h, seed, id + 1 + 2 * e,
                kInitStd);
    make_param(L.expert_fc2[le], n + "fc2.w", h * ffn_local_, false, ep_ > 1);
    fill_normal(L.expert_fc2[le].value.data(), h, ffn_local_, 0, tp_rank_ * ffn_local_, f, seed, id + 2 + 2 * e, out_std);
  }
}

std::vector<Buffer> Transformer::exchange(std::vector<Buffer>& rows, int64_t width) const {
  std::vector<Buffer> in(ep_);
  if (ep_ == 1) {
    in[0].swap(rows[0]);
    return in;
  }
  std::vector<float> counts(ep_);
  for (int d = 0; d < ep_; ++d) {
    counts[d] = static_cast<float>(static_cast<int64_t>(rows[d].size()) / width);
    if (d != ep_rank_) ep_comm_->send_async(&counts[d], 1, d, kCountTag);
  }
  for (int s = 0; s < ep_; ++s) {
    if (s == ep_rank_) continue;
    float count = 0;
    ep_comm_->recv(&count, 1, s, kCountTag);
    in[s].resize(static_cast<int64_t>(count) * width);
  }
  for (int d = 0; d < ep_; ++d)
    if (d != ep_rank_ && !rows[d].empty())
      ep_comm_->send_async(rows[d].data(), static_cast<int64_t>(rows[d].size()), d, kRowTag);
  for (int s = 0; s < ep_; ++s)
    if (s != ep_rank_ && !in[s].empty()) ep_comm_->recv(in[s].data(), static_cast<int64_t>(in[s].size()), s, kRowTag);
  in[ep_rank_].swap(rows[ep_rank_]);
  ep_comm_->wait_sends();
  return in;
}

void Transformer::moe_forward(Layer& L, Cache& c, const float* a, float* y, int n, Communicator&) const {
  const int h = static_cast<int>(m_.hidden), E = static_cast<int>(m_.experts), k = static_cast<int>(m_.experts_per_token);
  const int local = E / ep_, fl = static_cast<int>(ffn_local_), f1 = static_cast<int>(fc1_local_);
  // Router: softmax over the experts, the top k, their probabilities renormalized.
  c.gate_p.assign(static_cast<int64_t>(n) * E, 0.0f);
  kernels::matmul_forward(c.gate_p.data(), a, L.router.value.data(), nullptr, n, h, E);
  c.topk.assign(static_cast<size_t>(n) * k, 0);
  c.gate_w.assign(static_cast<int64_t>(n) * k, 0.0f);
  for (int t = 0; t < n; ++t) {
    float* p = c.gate_p.data() + static_cast<int64_t>(t) * E;
    const float max = *std::max_element(p, p + E);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(p[e] - max);
    for (int e = 0; e < E; ++e) p[e] /= sum;
    top_k(c.topk.data() + static_cast<int64_t>(t) * k, p, E, k);
    float chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[c.topk[t * k + j]];
    for (int j = 0; j < k; ++j) c.gate_w[t * k + j] = p[c.topk[t * k + j]] / chosen;
  }
  // Dispatch: each routed copy (its row and its expert's local index) to the expert's EP rank.
  std::vector<Buffer> out(ep_);
  c.sent.assign(ep_, {});
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = c.topk[t * k + j], d = e / local;
      out[d].insert(out[d].end(), a + static_cast<int64_t>(t) * h, a + static_cast<int64_t>(t + 1) * h);
      out[d].push_back(static_cast<float>(e % local));
      c.sent[d].push_back(t * k + j);
    }
  std::vector<Buffer> in = exchange(out, h + 1);
  // Each local expert on the rows it received, as one batch.
  c.expert_rows.assign(local, {});
  for (int s = 0; s < ep_; ++s)
    for (int64_t i = 0; i < static_cast<int64_t>(in[s].size()) / (h + 1); ++i)
      c.expert_rows[static_cast<int>(in[s][i * (h + 1) + h])].push_back({s, static_cast<int>(i)});
  std::vector<Buffer> back(ep_);
  for (int s = 0; s < ep_; ++s) back[s].assign(in[s].size() / (h + 1) * h, 0.0f);
  c.expert_x.assign(local, {}), c.expert_u.assign(local, {}), c.expert_g.assign(local, {});
  for (int le = 0; le < local; ++le) {
    const int rows = static_cast<int>(c.expert_rows[le].size());
    if (rows == 0) continue;
    Buffer& x = c.expert_x[le];
    x.resize(static_cast<int64_t>(rows) * h);
    for (int r = 0; r < rows; ++r) {
      const auto [s, i] = c.expert_rows[le][r];
      std::copy(in[s].data() + i * (h + 1), in[s].data() + i * (h + 1) + h, x.data() + static_cast<int64_t>(r) * h);
    }
    c.expert_u[le].resize(static_cast<int64_t>(rows) * f1), c.expert_g[le].resize(static_cast<int64_t>(rows) * fl);
    kernels::matmul_forward(c.expert_u[le].data(), x.data(), L.expert_fc1[le].value.data(), nullptr, rows, h, f1);
    kernels::swiglu_forward(c.expert_g[le].data(), c.expert_u[le].data(), rows, fl);
    Buffer ye(static_cast<int64_t>(rows) * h);
    kernels::matmul_forward(ye.data(), c.expert_g[le].data(), L.expert_fc2[le].value.data(), nullptr, rows, fl, h);
    for (int r = 0; r < rows; ++r) {
      const auto [s, i] = c.expert_rows[le][r];
      std::copy(ye.data() + static_cast<int64_t>(r) * h, ye.data() + static_cast<int64_t>(r + 1) * h,
                back[s].data() + static_cast<int64_t>(i) * h);
    }
  }
  // Combine: the outputs come back in the order the copies went; y = sum of weight x output.
  std::vector<Buffer> returned = exchange(back, h);
  c.routed_y.assign(static_cast<int64_t>(n) * k * h, 0.0f);
  std::fill(y, y + static_cast<int64_t>(n) * h, 0.0f);
  for (int d = 0; d < ep_; ++d)
    for (size_t i = 0; i < c.sent[d].size(); ++i) {
      const int copy = c.sent[d][i], t = copy / k;
      const float* ye = returned[d].data() + static_cast<int64_t>(i) * h;
      std::copy(ye, ye + h, c.routed_y.data() + static_cast<int64_t>(copy) * h);
      for (int x = 0; x < h; ++x) y[static_cast<int64_t>(t) * h + x] += c.gate_w[copy] * ye[x];
    }
}

void Transformer::moe_backward(Layer& L, Cache& c, const float* dy, float* a, float* da, int n, Communicator& tp,
                               WeightGradients* later) const {
  const int h = static_cast<int>(m_.hidden), E = static_cast<int>(m_.experts), k = static_cast<int>(m_.experts_per_token);
  const int local = E / ep_, fl = static_cast<int>(ffn_local_), f1 = static_cast<int>(fc1_local_);
  // The combine weights' gradients: <dy, expert output>, whose partial sums over TP add up.
  Buffer dw(static_cast<int64_t>(n) * k, 0.0f);
  for (int copy = 0; copy < n * k; ++copy)
    for (int x = 0; x < h; ++x) dw[copy] += dy[static_cast<int64_t>(copy / k) * h + x] * c.routed_y[static_cast<int64_t>(copy) * h + x];
  tp.all_reduce(dw.data(), static_cast<int64_t>(dw.size()), ReduceOp::kSum);
  // Each copy's output gradient, weight x dy, to the rank that computed it.
  std::vector<Buffer> out(ep_);
  for (int d = 0; d < ep_; ++d)
    for (int copy : c.sent[d])
      for (int x = 0; x < h; ++x) out[d].push_back(c.gate_w[copy] * dy[static_cast<int64_t>(copy / k) * h + x]);
  std::vector<Buffer> in = exchange(out, h);
  std::vector<Buffer> back(ep_);
  for (int s = 0; s < ep_; ++s) back[s].assign(in[s].size(), 0.0f);
  for (int le = 0; le < local; ++le) {
    const int rows = static_cast<int>(c.expert_rows[le].size());
    if (rows == 0) continue;
    Buffer dye(static_cast<int64_t>(rows) * h), dg(static_cast<int64_t>(rows) * fl, 0.0f),
        du(static_cast<int64_t>(rows) * f1, 0.0f), dx(static_cast<int64_t>(rows) * h, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const auto [s, i] = c.expert_rows[le][r];
      std::copy(in[s].data() + static_cast<int64_t>(i) * h, in[s].data() + static_cast<int64_t>(i + 1) * h,
                dye.data() + static_cast<int64_t>(r) * h);
    }
    linear_backward(dg.data(), L.expert_fc2[le], nullptr, dye.data(), c.expert_g[le].data(),
                    L.expert_fc2[le].value.data(), rows, fl, h, later);
    kernels::swiglu_backward(du.data(), c.expert_u[le].data(), dg.data(), rows, fl);
    linear_backward(dx.data(), L.expert_fc1[le], nullptr, du.data(), c.expert_x[le].data(),
                    L.expert_fc1[le].value.data(), rows, h, f1, later);
    for (int r = 0; r < rows; ++r) {
      const auto [s, i] = c.expert_rows[le][r];
      std::copy(dx.data() + static_cast<int64_t>(r) * h, dx.data() + static_cast<int64_t>(r + 1) * h,
                back[s].data() + static_cast<int64_t>(i) * h);
    }
  }
  // The input gradients of the copies come home and add up per token (partial over TP).
  std::vector<Buffer> returned = exchange(back, h);
  for (int d = 0; d < ep_; ++d)
    for (size_t i = 0; i < c.sent[d].size(); ++i) {
      const int t = c.sent[d][i] / k;
      for (int x = 0; x < h; ++x) da[static_cast<int64_t>(t) * h + x] += returned[d][static_cast<int64_t>(i) * h + x];
    }
  // Router: w_j = p_j / S over the chosen experts (S their sum); p = softmax(logits).
  Buffer dlogits(static_cast<int64_t>(n) * E, 0.0f);
  for (int t = 0; t < n; ++t) {
    const float* p = c.gate_p.data() + static_cast<int64_t>(t) * E;
    float chosen = 0, wdw = 0;
    for (int j = 0; j < k; ++j) chosen += p[c.topk[t * k + j]], wdw += c.gate_w[t * k + j] * dw[t * k + j];
    std::vector<float> dp(E, 0.0f);
    for (int j = 0; j < k; ++j) dp[c.topk[t * k + j]] = (dw[t * k + j] - wdw) / chosen;
    float pdp = 0;
    for (int e = 0; e < E; ++e) pdp += p[e] * dp[e];
    for (int e = 0; e < E; ++e) dlogits[static_cast<int64_t>(t) * E + e] = p[e] * (dp[e] - pdp);
  }
  // The router runs whole on every TP rank: its input gradient enters the TP sum once.
  gather_tokens(a, c.a2.data(), n, tp);
  Buffer da_router(static_cast<int64_t>(n) * h, 0.0f);
  linear_backward(da_router.data(), L.router, nullptr, dlogits.data(), a, L.router.value.data(), n, h, E, later);
  if (tp_rank_ == 0)
    for (int64_t i = 0; i < static_cast<int64_t>(n) * h; ++i) da[i] += da_router[i];
}

}  // namespace parallax
