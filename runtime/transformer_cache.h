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

struct Transformer::MicroBatch {
  std::vector<Cache> layers;
  std::vector<int> tokens;  // first virtual stage: for the embedding's backward
  Buffer dhead;             // last virtual stage: gradient of the last layer's output
};

}  // namespace parallax
