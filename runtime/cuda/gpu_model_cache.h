// What a GPU transformer layer keeps from its forward for its backward, and the tensor indices of
// its parameters (private to runtime/cuda/gpu_*.cc). Mirrors runtime/transformer_cache.h, with
// the attention's log-sum-exp in place of its probabilities.
#pragma once

#include "runtime/cuda/gpu_model.h"

namespace parallax {

template <class T>
struct GpuModel<T>::Layer {
  int64_t ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1, ln2_w = -1, ln2_b = -1,
          fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
};

template <class T>
struct GpuModel<T>::Cache {
  DeviceArray<T> x;                 // layer input (local tokens x h)
  DeviceArray<float> n1a, n1b;      // first norm statistics (mean and 1/std, or 1/rms)
  DeviceArray<T> a;                 // first norm output
  DeviceArray<T> q, k, v, o;        // after RoPE, local heads; attention output
  DeviceArray<float> lse;           // attention log-sum-exp (b, heads, s)
  DeviceArray<T> x1;                // residual stream after attention
  DeviceArray<float> n2a, n2b;
  DeviceArray<T> a2, u, g;          // second norm output, FC1 output, activation output
  void keep_input_only() {
    DeviceArray<T> input = std::move(x);
    *this = Cache{};
    x = std::move(input);
  }
};

// Split weight gradients: one linear layer's weight-gradient GEMM, dW += dout^T x (and db += the
// column sums of dout), with copies of x [n, c] and dout [n, oc] that live from B to W.
template <class T>
struct GpuModel<T>::WeightGemm {
  int64_t weight = -1, bias = -1;  // tensor indices; bias -1: none
  DeviceArray<T> x, dout;
  int n = 0, c = 0, oc = 0;
};

template <class T>
struct GpuModel<T>::MicroBatch {
  std::vector<Cache> layers;
  const int* tokens = nullptr;  // first stage: for the embedding's backward (the trainer's step buffer)
  DeviceArray<T> dhead;         // last stage: gradient of the last layer's output
  std::vector<std::vector<WeightGemm>> weight_gemms;  // split weight gradients: per layer, from B to W
};

}  // namespace parallax
