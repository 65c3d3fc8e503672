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
};

struct Transformer::MicroBatch {
  std::vector<Cache> layers;
  std::vector<int> tokens;  // first virtual stage: for the embedding's backward
  Buffer dhead;             // last virtual stage: gradient of the last layer's output
};

}  // namespace parallax
