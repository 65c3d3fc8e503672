// Transformer: the GPT-2-style (LayerNorm, GELU, learned positions, biases) or Llama-style
// (RMSNorm, SwiGLU, RoPE, GQA) decoder the CPU runtime trains, built from the same config.json
// as the planner and sharded Megatron-style over a TP group: QKV and FC1 column-parallel, the
// attention output and FC2 row-parallel (an all-reduce after each), embedding and output layer
// vocab-parallel with a vocab-parallel cross-entropy. Parameters start identical whatever the
// plan (init.h). Math in fp32 on the CPU reference kernels.
//
// With pipeline parallelism a rank holds `chunks` model chunks: chunk c is virtual stage
// c * pp + pp_rank with layers [vs * L/(pp v), (vs + 1) * L/(pp v)); the embedding sits on virtual
// stage 0 and the final norm, output layer and loss on the last one (with tied embeddings the
// last stage keeps its own copy of the embedding, whose gradient the trainer all-reduces with the
// first stage's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/layer_cost.h"
#include "models/model_spec.h"
#include "models/status.h"
#include "program/plan.h"
#include "runtime/buffer.h"
#include "kernels/attention.h"
#include "runtime/communicator.h"

namespace parallax {

// The vocabulary every plan trains: padded to a multiple of 128, independent of TP, so that every
// plan's model is the same (the CPU and GPU runtimes both use it).
int64_t padded_vocab(const ModelSpec& m);

// What a parameter is, decided where it is created (never from its name): norms' parameters see
// only this rank's tokens under SP, and norms and biases take no weight decay by default.
enum class ParamRole : uint8_t { kMatrix, kEmbedding, kNormWeight, kNormBias, kBias };
inline bool is_norm(ParamRole r) { return r == ParamRole::kNormWeight || r == ParamRole::kNormBias; }
// AdamW's weight decay applies to matrices and embeddings; to norms and biases only when asked
// (Megatron-LM's default: no decay on them, --apply-wd-to-qk-layernorm aside).
inline bool decays(ParamRole r, bool decay_norms_and_biases) {
  return r == ParamRole::kMatrix || r == ParamRole::kEmbedding || decay_norms_and_biases;
}

// A block of a full parameter tensor, viewed as [rows, cols] row-major (a vector has one row): a
// rank's `value` holds its pieces one after another, each row-major.
struct ParamPiece {
  int64_t row = 0, rows = 1, col = 0, cols = 0;
};

struct Param {
  std::string name;  // the full tensor's, the same on every rank and plan ("layer3.qkv.w")
  Buffer value, grad;
  ParamRole role = ParamRole::kMatrix;
  bool tp_replicated = false;  // every TP rank holds the same values (norms, row biases, positions)
  bool sp_partial = false;     // a norm parameter: with SP its gradient is a partial sum over TP
  bool expert = false;         // a routed expert's under EP: reduced over the expert data-parallel ranks
  int64_t size = 0;            // elements; `value` may be released between uses under ZeRO-3
  // Where this rank's elements sit in the full tensor of `shape` ([n] or [rows, cols]): a TP shard
  // of QKV holds a block of Q rows, one of K and one of V. Checkpoints store shards with their
  // pieces, so any plan can reassemble the full tensor (runtime/checkpoint.h).
  std::vector<int64_t> shape;
  std::vector<ParamPiece> pieces;
  bool empty() const { return size == 0; }
};

class Transformer {
 public:
  // The vocabulary is padded to a multiple of 128 (independent of TP, so every plan trains the
  // same model); errors name the dimension TP does not divide.
  // `chunk_layers`: each chunk's layers when the pipeline is uneven (Plan::chunk_layers; a chunk
  // may hold none); empty = an equal share per chunk.
  // MoE models: each rank holds experts [ep_rank, ep_rank + 1) x experts / ep of every MoE layer.
  static Result<Transformer> create(const ModelSpec& m, int tp, int tp_rank, uint64_t seed, int pp = 1,
                                    int pp_rank = 0, int chunks = 1, const std::vector<Plan::LayerRange>& chunk_layers = {}, int ep = 1,
                                    int ep_rank = 0);

  std::vector<Param*> params();
  // The parameters of one model chunk: its layers, and the embedding (first virtual stage) or the
  // final norm and output layer (last virtual stage).
  std::vector<Param*> chunk_params(int chunk);
  int chunks() const { return chunks_; }
  int64_t padded_vocab() const { return vocab_padded_; }
  bool first_stage(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last_stage(int chunk) const { return virtual_stage(chunk) == pp_ * chunks_ - 1; }
  // The embedding copy the last stage holds for tied embeddings (null otherwise).
  Param* tied_head_copy() { return m_.tied_embeddings && pp_ > 1 && !head_.empty() ? &head_ : nullptr; }
  Param* embedding() { return wte_.empty() ? nullptr : &wte_; }

  // What one micro-batch keeps between its forward and backward through one chunk.
  struct MicroBatch;

  // Forward of one chunk for a micro-batch of b sequences of s tokens. The first virtual stage
  // reads `tokens`, the others `input` (b s x h). The last virtual stage also computes the loss
  // and its gradient (each token weighted by `loss_weight`) and returns the summed token loss;
  // the others write their output activation to `output` and return 0.
  double forward(int chunk, const int* tokens, const int* targets, const float* input, float* output, int b, int s,
                 float loss_weight, Communicator& tp, MicroBatch& state);
  // Backward of one chunk: `dout` is the gradient of its output (unused on the last virtual
  // stage); writes the gradient of its input to `dinput` (unused on the first). Gradients
  // accumulate into the params; `state` is consumed — with split weight gradients, all but what
  // weight_backward needs.
  void backward(int chunk, const float* dout, float* dinput, int b, int s, Communicator& tp, MicroBatch& state);
  // Zero-bubble schedules (ZB-H1: program/schedule.h splits_weight_gradients) run a chunk's
  // backward as B, the input gradients only, and later W, the parameter gradients. Split, backward()
  // keeps in `state` what each parameter gradient of the chunk's layers and embedding needs —
  // copies of each linear layer's GEMM input and output gradient exactly as the combined backward
  // multiplies them (SP-gathered, FP8-rounded), each norm's input, statistics and output gradient,
  // the embedding output's gradient — and weight_backward() accumulates them, with the same
  // arithmetic as the combined backward, and consumes `state`. W reads no parameter values (ZeRO-3
  // has released them) and issues no collectives. The last virtual stage's head keeps computing
  // its gradients in forward(), as it does unsplit.
  void set_split_weight_gradients(bool on) { split_weight_gradients_ = on; }
  bool split_weight_gradients() const { return split_weight_gradients_; }
  void weight_backward(int chunk, int b, int s, MicroBatch& state);

  // Full: keep only each layer's input and re-run its forward before its backward; selective:
  // drop the attention probabilities and recompute them (Korthikanti et al.).
  // `full_fraction` < 1 (full only): just that share of the layers recomputes, evenly spaced over
  // the model as fms-fsdp spaces them — layer i when round(i p) < round((i + 1) p), halves up.
  void set_recompute(Recompute r, double full_fraction = 1);
  static bool recomputes_layer(int64_t index, double full_fraction);
  // Sequence parallelism: outside the TP regions each TP rank holds 1/t of the tokens (seq_len
  // must divide by t). Norm weights then see only local tokens: their gradients are partial and
  // the trainer sums them over TP (Param::sp_partial).
  void set_sequence_parallel(bool on) { sequence_parallel_ = on && tp_ > 1; }
  bool sequence_parallel() const { return sequence_parallel_; }
  int local_tokens(int n) const { return sequence_parallel_ ? n / tp_ : n; }
  // Expert parallelism: the communicator of the ep ranks that exchange tokens (MoE models; the
  // ranks of `create`'s ep). Each MoE layer routes every token to its top-k experts (softmax over
  // the router's logits, the k largest — ties to the lower expert — renormalized), sends each
  // routed copy to the rank holding its expert and the expert's output back (dropless).
  void set_expert_communicator(Communicator* comm) { ep_comm_ = comm; }
  // FP8 (current scaling): the linear layers' GEMM operands are rounded as Transformer Engine
  // casts them — inputs and weights to E4M3, output gradients to E5M2 — each tensor scaled so that
  // its amax (over the TP and CP ranks that share it) maps to the format's largest value.
  void set_fp8(bool on) { fp8_ = on; }
  // Context parallelism: this rank holds chunks r and 2 cp - 1 - r of the 2 cp equal chunks of
  // every sequence (Megatron-Core's causal load balancing); forward and backward then take the
  // local length seq_len / cp. Each layer brings every rank's K and V block to the local queries
  // and sums their gradients back to the owners: over a ring of point-to-point steps (cp_comm
  // p2p: cp - 1 steps each way, the blocks Megatron-Core's ring passes, though the attention runs
  // after the last step rather than block by block), or by an all-gather and a reduce-scatter.
  void set_context_parallel(int cp, int cp_rank, int seq_len, Communicator* comm, bool ring);
  // The positions in its sequence of each of this rank's seq_len / cp tokens.
  const std::vector<int>& context_positions() const { return positions_; }

  // forward + backward of the whole model on one stage (pp = 1); returns the summed token loss.
  double forward_backward(const int* inputs, const int* targets, int b, int s, float loss_weight, Communicator& tp);

 private:
  struct Layer {
    Param ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
    Param router;                            // MoE: [experts, h], replicated
    std::vector<Param> expert_fc1, expert_fc2;  // MoE: this rank's experts, TP-sharded like fc1/fc2
    std::vector<Param*> params();
    int64_t index = 0;        // in the model
    bool recomputes = true;   // under full recompute
  };
  struct Cache;  // one layer's saved activations
  struct WeightGradient;  // a parameter gradient B leaves for W (transformer_cache.h)
  using WeightGradients = std::vector<WeightGradient>;

  Transformer() = default;
  void init_layer(Layer& layer, int64_t index, uint64_t seed);
  void norm_forward(const Param& w, const Param& b, float* out, float* stat_a, float* stat_b, const float* in, int n) const;
  // The backward passes below accumulate parameter gradients now, or, given `later` (split weight
  // gradients), compute the input gradients only and append what the parameter gradients need.
  void norm_backward(Param& w, Param& b, float* din, const float* dout, const float* in, const float* stat_a,
                     const float* stat_b, int n, WeightGradients* later = nullptr) const;
  // dinp += dout W and W's gradient dW += dout^T x (db += column sums of dout; b may be null).
  void linear_backward(float* dinp, Param& w, Param* b, const float* dout, const float* x, const float* weight, int n,
                       int c, int oc, WeightGradients* later) const;
  void accumulate(const WeightGradient& g) const;  // W: one parameter gradient B left
  void embedding_gradient(const float* dx_full, const int* tokens, int n, int s);
  void layer_forward(Layer& layer, Cache& c, float* x, int b, int s, Communicator& tp) const;
  void layer_backward(Layer& layer, Cache& c, float* dx, int b, int s, Communicator& tp, WeightGradients* later) const;
  // The MLP of n tokens (full over TP): y (partial over TP) from the second norm's output a; the
  // backward accumulates da (partial over TP) from dy (full).
  void mlp_forward(Layer& layer, Cache& c, const float* a, float* y, int n, Communicator& tp) const;
  // `a` is scratch the backward gathers the second norm's output into again (SP keeps only this
  // rank's tokens).
  void mlp_backward(Layer& layer, Cache& c, const float* dy, float* a, float* da, int n, Communicator& tp,
                    WeightGradients* later) const;
  void moe_forward(Layer& layer, Cache& c, const float* a, float* y, int n, Communicator& tp) const;
  void moe_backward(Layer& layer, Cache& c, const float* dy, float* a, float* da, int n, Communicator& tp,
                    WeightGradients* later) const;
  void init_experts(Layer& layer, const std::string& name, int64_t index, uint64_t seed);
  // Sets every parameter's full shape and pieces (transformer_shards.cc).
  void describe_shards();
  // EP: sends rows[d] (of `width` floats) to EP rank d; returns what each rank sent here.
  std::vector<Buffer> exchange(std::vector<Buffer>& rows, int64_t width) const;
  void gather_tokens(float* full, const float* local, int n, Communicator& tp) const;
  // With FP8 the rounded copy of a GEMM operand of n values (kept alive in `keep`); else `x`.
  const float* gemm_operand(Buffer& keep, const float* x, int64_t n, bool gradient, Communicator& tp) const;
  // CP: [b, s/cp, width] of every CP rank into [b, s, width] in sequence order, and back (summed).
  void gather_context(Buffer& full, const Buffer& local, int b, int s, int width) const;
  void scatter_context(Buffer& local, const Buffer& full, int b, int s, int width) const;
  // The attention of b sequences of which this rank holds s tokens each (all s, or s / cp under CP).
  kernels::AttentionShape attention_shape(int b, int s) const;
  void reduce_tokens(float* local, float* full, int n, Communicator& tp) const;
  void drop_for_recompute(const Layer& layer, Cache& c) const;
  void recompute(Layer& layer, Cache& c, int b, int s, Communicator& tp) const;
  double head_forward_backward(const float* x, float* dx, const int* targets, int n, float loss_weight,
                               Communicator& tp);

  float eps() const { return static_cast<float>(m_.norm_eps); }
  int64_t virtual_stage(int chunk) const { return static_cast<int64_t>(chunk) * pp_ + pp_rank_; }

  ModelSpec m_;
  int tp_ = 1, tp_rank_ = 0, pp_ = 1, pp_rank_ = 0, chunks_ = 1;
  int64_t vocab_padded_ = 0, vocab_local_ = 0, q_local_ = 0, kv_local_ = 0, ffn_local_ = 0, fc1_local_ = 0;
  float rope_base_ = 10000.0f;
  Recompute recompute_ = Recompute::kNone;
  bool sequence_parallel_ = false;
  bool fp8_ = false;
  bool split_weight_gradients_ = false;
  int ep_ = 1, ep_rank_ = 0;
  Communicator* ep_comm_ = nullptr;
  int cp_ = 1, cp_rank_ = 0;
  bool cp_ring_ = false;
  Communicator* cp_comm_ = nullptr;
  std::vector<int> positions_;  // CP: this rank's token positions in a sequence
  std::vector<std::vector<Layer>> layers_;  // per chunk
  Param wte_, wpe_, lnf_w_, lnf_b_, head_;
};

}  // namespace parallax
