// The activations one transformer layer keeps from its forward for its backward (private to
// transformer*.cc).
#pragma once

#include "runtime/transformer.h"

namespace parallax {

struct Transformer::Cache {
  Buffer x;              // layer input (N x h)
  Buffer n1a, n1b;       // first norm statistics (mean and 1/std, or 1/rms)
  Buffer a;              // first norm output
  Buffer q, k, v;        // after RoPE, local heads
  Buffer probs;          // attention probabilities (b, heads, s, s)
  Buffer o;              // attention output before the projection
  Buffer x1;             // residual stream after attention
  Buffer n2a, n2b, a2;   // second norm
  Buffer u, g;           // FC1 output and activation output
  // MoE: the router's probabilities (n x E), each token's top-k experts and combine weights, the
  // expert output of each routed copy (n x k x h, partial over TP), which copies went to which EP
  // rank, and per local expert the rows it received (source rank, index) and its activations.
  Buffer gate_p, gate_w, routed_y;
  std::vector<int> topk;
  std::vector<std::vector<int>> sent;  // per EP rank: the (token * k + slot) copies, in order
  std::vector<std::vector<std::pair<int, int>>> expert_rows;
  std::vector<Buffer> expert_x, expert_u, expert_g;
};

// Split weight gradients: one parameter gradient B leaves for W, with copies of its operands
// (they live from B to W only). A linear layer: dW += dout^T x and db += the column sums of dout,
// x [rows, cols] and dout [rows, outputs] as the GEMM saw them. A norm (`norm`): dweight (and
// dbias) from its input x and output gradient dout [rows, h] and its statistics.
struct Transformer::WeightGradient {
  bool norm = false;
  Param* weight = nullptr;
  Param* bias = nullptr;  // null: none
  Buffer x, dout, stat_a, stat_b;
  int rows = 0, cols = 0, outputs = 0;
};

struct Transformer::MicroBatch {
  std::vector<Cache> layers;
  std::vector<int> tokens;  // first virtual stage: for the embedding's backward
  Buffer dhead;             // last virtual stage: gradient of the last layer's output
  // Split weight gradients, from B to W: the chunk's layers' parameter gradients, last layer
  // first, and (first virtual stage) the gradient of the embedding output, gathered over TP.
  WeightGradients weight_gradients;
  Buffer dembedding;
};

}  // namespace parallax
