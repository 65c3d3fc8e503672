// Where each parameter's local elements sit in its full tensor: the same splits init_layer and
// init_experts fill (Megatron's column- and row-parallel layers, a vocab-parallel embedding), so
// that a checkpoint written under one plan reassembles into full tensors and reslices for any
// other (runtime/checkpoint.h).
#include "runtime/transformer.h"

namespace parallax {

namespace {

// A tensor every TP rank holds whole.
void whole(Param& p, int64_t rows, int64_t cols) {
  p.shape = rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
  p.pieces = {{0, rows, 0, cols}};
}

// Rows [start, start + n) of each block of a column-parallel weight [rows, cols], or with cols = 0
// elements [start, start + n) of its bias, a vector of `rows`.
void row_blocks(Param& p, int64_t rows, int64_t cols, std::initializer_list<std::pair<int64_t, int64_t>> blocks) {
  p.shape = cols == 0 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
  p.pieces.clear();
  for (const auto& [start, n] : blocks)
    p.pieces.push_back(cols == 0 ? ParamPiece{0, 1, start, n} : ParamPiece{start, n, 0, cols});
}

}  // namespace

void Transformer::describe_shards() {
  const int64_t h = m_.hidden, q = m_.q_dim(), kv = m_.kv_dim(), f = m_.ffn_hidden;
  const int64_t t = tp_rank_;
  const bool gated = m_.mlp == Mlp::kSwiGlu;
  auto vocab = [&](Param& p) { row_blocks(p, vocab_padded_, h, {{t * vocab_local_, vocab_local_}}); };
  for (Param* p : params())
    if (p->tp_replicated) whole(*p, 1, p->size);  // norms, row-parallel biases; matrices below
  if (!wte_.empty()) vocab(wte_);
  if (!wpe_.empty()) whole(wpe_, m_.max_positions, h);
  if (!head_.empty()) vocab(head_);
  // Column-parallel: this rank's rows of each block (Q, K, V; SwiGLU's gate and up). Row-parallel:
  // this rank's columns.
  auto fc1 = [&](Param& p, int64_t cols) {
    if (gated) row_blocks(p, 2 * f, cols, {{t * ffn_local_, ffn_local_}, {f + t * ffn_local_, ffn_local_}});
    else row_blocks(p, f, cols, {{t * ffn_local_, ffn_local_}});
  };
  auto fc2 = [&](Param& p) {
    p.shape = {h, f};
    p.pieces = {{0, h, t * ffn_local_, ffn_local_}};
  };
  for (auto& chunk : layers_)
    for (Layer& L : chunk) {
      row_blocks(L.qkv_w, q + 2 * kv, h, {{t * q_local_, q_local_}, {q + t * kv_local_, kv_local_}, {q + kv + t * kv_local_, kv_local_}});
      if (!L.qkv_b.empty())
        row_blocks(L.qkv_b, q + 2 * kv, 0, {{t * q_local_, q_local_}, {q + t * kv_local_, kv_local_}, {q + kv + t * kv_local_, kv_local_}});
      L.proj_w.shape = {h, q};
      L.proj_w.pieces = {{0, h, t * q_local_, q_local_}};
      if (!L.router.empty()) whole(L.router, m_.experts, h);
      if (!L.fc1_w.empty()) fc1(L.fc1_w, h), fc2(L.fc2_w);
      if (!L.fc1_b.empty()) fc1(L.fc1_b, 0);
      for (Param& e : L.expert_fc1) fc1(e, h);
      for (Param& e : L.expert_fc2) fc2(e);
    }
}

}  // namespace parallax
