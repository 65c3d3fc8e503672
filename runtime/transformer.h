// Transformer: the GPT-2-style (LayerNorm, GELU, learned positions, biases) or Llama-style
// (RMSNorm, SwiGLU, RoPE, GQA) decoder the CPU runtime trains, built from the same config.json
// as the planner and sharded Megatron-style over a TP group: QKV and FC1 column-parallel, the
// attention output and FC2 row-parallel (an all-reduce after each), embedding and output layer
// vocab-parallel with a vocab-parallel cross-entropy. Parameters start identical whatever the
// plan (init.h). Math in fp32 on the CPU reference kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "models/status.h"
#include "runtime/buffer.h"
#include "runtime/communicator.h"

namespace parallax {

struct Param {
  std::string name;
  Buffer value, grad;
  bool tp_replicated = false;  // every TP rank holds the same values (norms, row biases, positions)
  bool empty() const { return value.empty(); }
};

class Transformer {
 public:
  // The vocabulary is padded to a multiple of 128 (independent of TP, so every plan trains the
  // same model); errors name the dimension TP does not divide.
  static Result<Transformer> create(const ModelSpec& m, int tp, int tp_rank, uint64_t seed);

  std::vector<Param*> params();
  int64_t padded_vocab() const { return vocab_padded_; }

  // Forward and backward of one micro-batch of b sequences of s tokens (inputs and targets are
  // b * s ids); gradients accumulate into the params. Every token's loss is weighted by
  // `loss_weight` in the gradient. Returns the micro-batch's summed token loss.
  double forward_backward(const int* inputs, const int* targets, int b, int s, float loss_weight, Communicator& tp);

 private:
  struct Layer {
    Param ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  struct Cache;  // one layer's saved activations

  Transformer() = default;
  void init_layer(Layer& layer, int64_t index, uint64_t seed);
  void norm_forward(const Param& w, const Param& b, float* out, float* stat_a, float* stat_b, const float* in, int n) const;
  void norm_backward(Param& w, Param& b, float* din, const float* dout, const float* in, const float* stat_a,
                     const float* stat_b, int n) const;
  void layer_forward(Layer& layer, Cache& c, float* x, int b, int s, Communicator& tp) const;
  void layer_backward(Layer& layer, Cache& c, float* dx, int b, int s, Communicator& tp) const;
  double head_forward_backward(const float* x, float* dx, const int* targets, int n, float loss_weight,
                               Communicator& tp);

  ModelSpec m_;
  int tp_ = 1, tp_rank_ = 0;
  int64_t vocab_padded_ = 0, vocab_local_ = 0, q_local_ = 0, kv_local_ = 0, ffn_local_ = 0, fc1_local_ = 0;
  float rope_base_ = 10000.0f;
  std::vector<Layer> layers_;
  Param wte_, wpe_, lnf_w_, lnf_b_, head_;
};

}  // namespace parallax
