// Per-layer costs of a ModelSpec: parameters, FLOPs of the forward, input-gradient and
// weight-gradient passes, the GEMM shapes and memory-bound bytes behind them, and the activation
// bytes a layer keeps for its backward pass under each recompute / TP / sequence-parallel mode.
// These are the records the memory model, the analytical step model and the simulator consume.
//
// Conventions (DESIGN.md): FLOPs count a multiply-add as 2; model FLOPs count the full s x s
// attention square (QK^T and AV: 4*s*q_dim per token) even though the mask makes half of it dead
// work (kModelFlopsConvention; hardware_flops_per_step counts what a causal kernel executes);
// backward = 2 x forward, split into input-gradient (B) and weight-gradient (W) passes. Activations are 16-bit
// (2 bytes), dropout masks 1 byte, following Korthikanti et al. 2022.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_spec.h"

namespace parallax {

enum class Recompute { kNone, kSelective, kFull };
// Training precision: fp32, or mixed precision with 16-bit weights/activations and fp32 master
// weights and optimizer states; fp8 is bf16 mixed precision whose linear layers' GEMMs run in FP8
// (Transformer Engine: E4M3 forward, E5M2 gradients) at the GPU's FP8 peak.
enum class Precision { kFp32, kBf16, kFp16, kFp8 };
// The precision of everything but the linear layers' GEMMs: FP8 plans keep bf16 there.
inline Precision base_precision(Precision p) { return p == Precision::kFp8 ? Precision::kBf16 : p; }
// materialized: the s x s scores are written to memory (softmax, dropout as separate kernels), as in
// Megatron-LM 2022; flash: one fused kernel keeps only the log-sum-exp and skips masked blocks.
enum class AttentionKernel { kMaterialized, kFlash };
// fused: each norm, activation and rotary embedding is one kernel (Megatron / Transformer Engine,
// or torch.compile); eager: PyTorch eager ops as Llama reference code writes them (torchtitan's
// model): RMSNorm in fp32 over five ops, rotary through complex fp32, SwiGLU as two kernels,
// GQA's repeat_kv and the attention output's transpose as copies.
enum class KernelFusion { kFused, kEager };
// What `selective` recompute re-runs: Megatron's modules (below; by default the attention core of
// Korthikanti et al.: softmax, dropout and the two attention GEMMs), or torchtitan's op-level
// policy (selective_ac_option 'op': the outputs of matmuls are saved except every second one, and
// the attention kernel's; the rest re-runs — for Llama the K, O and up projections and every
// elementwise op).
enum class SelectiveRecompute { kAttentionCore, kOps };
// Megatron-Core's --recompute-modules, a set (bits) re-run under kAttentionCore's policy:
// core_attn (its default), layernorm (the norms' outputs, not kept, recomputed from their inputs),
// moe_act (the routed experts' activation function: its output, FC2's input, not kept) and
// mla_up_proj (MLA's query and key-value up-projections and RoPE, recomputed from the latents).
enum RecomputeModule : unsigned { kCoreAttn = 1u, kLayernorm = 2u, kMoeAct = 4u, kMlaUpProj = 8u };
// Weights of MLA's up-projections, per layer (kv_up, and q's from its latent when it has one).
int64_t mla_up_proj_weights(const ModelSpec& m);

// Parameters of one transformer layer, split by how tensor and expert parallelism treat them (of
// a leading dense layer of an MoE model: layer_params(dense_layer_model(m))).
struct LayerParams {
  int64_t tp_sharded = 0;  // matmul weights and column-parallel biases: divided by t
  int64_t replicated = 0;  // norms, row-parallel biases, MoE router: every TP rank holds them
  int64_t expert = 0;      // routed experts' weights: divided by expert TP and by EP
  int64_t total() const { return tp_sharded + replicated + expert; }
};
LayerParams layer_params(const ModelSpec& m);
// The multi-token-prediction depths' parameters (ModelSpec::mtp_layers, on the last stage): each a
// layer of the model's last kind, eh_proj (2h x h, split by TP) and three norms; the embedding and
// output head are the model's own.
LayerParams mtp_params(const ModelSpec& m);

// Parameters outside the transformer layers.
struct EdgeParams {
  int64_t token_embedding = 0;     // V x h, vocab-parallel (divided by t), first stage
  int64_t position_embedding = 0;  // s_max x h for learned positions, replicated, first stage
  int64_t output_head = 0;         // V x h when untied, vocab-parallel, last stage
  int64_t final_norm = 0;          // replicated, last stage
};
EdgeParams edge_params(const ModelSpec& m);

int64_t total_params(const ModelSpec& m);
// Weights a token touches in its matmuls in one layer (MoE: only the top-k experts).
int64_t active_matmul_weights_per_layer(const ModelSpec& m);

// FLOPs per token of one layer at sequence length s (attention grows with s).
struct PassFlops {
  double forward = 0;
  double backward_input = 0;   // B: gradients w.r.t. inputs, incl. attention core backward
  double backward_weight = 0;  // W: gradients w.r.t. weights
  double backward() const { return backward_input + backward_weight; }
};
PassFlops layer_flops_per_token(const ModelSpec& m, int64_t seq_len);
// The forward FLOPs of attention's QK^T and AV alone, per token (full square).
double attention_core_flops_per_token(const ModelSpec& m, int64_t seq_len);
// Output layer, per token: forward 2*h*V, backward twice that.
PassFlops logits_flops_per_token(const ModelSpec& m);

// The convention of model FLOPs, and so of MFU: PaLM's (Chowdhery et al. 2022, appendix B), which
// torchtitan and Narayanan et al. 2021 follow — 6 FLOPs per matmul weight and token (the logits
// included, the embedding lookup not) plus 12 L H Q s for attention over the whole s x s square:
// the masked half of causal attention is counted and recomputation is not. (Megatron-LM's current
// num_floating_point_operations halves the square for the causal mask; its MFU at 131k tokens is
// about half of this one.) Reports name it beside MFU.
inline constexpr const char* kModelFlopsConvention = "palm: 6N + 12LHQs, full s x s attention, no recompute";

// Model FLOPs of one step (no recompute): 3 x forward over all layers and the logits, and each
// multi-token-prediction depth's layer, eh_proj and head (as NeMo's DeepSeek-V3 formula counts them).
double model_flops_per_step(const ModelSpec& m, int64_t seq_len, int64_t global_batch);
// The share of the s x s attention square the kernel computes. Materialized attention multiplies
// the whole square and masks the scores; a causal flash kernel skips the tiles above the diagonal
// and computes the diagonal ones whole: n (n + 1) / 2 of n^2 tiles, n = s / 128 (FlashAttention-2/3
// work in 128-row tiles), 1/2 + 64/s.
double attention_executed_fraction(int64_t seq_len, AttentionKernel kernel);
// Hardware FLOPs: what the kernels execute. Matmuls as model FLOPs; the attention core as
// attention_executed_fraction of the square, and a flash kernel's backward 2.5 x its forward (it
// recomputes Q K^T; the FlashAttention benchmarks' convention); plus what activation recompute
// re-runs (one forward of every layer for full recompute, of recompute_fraction of them when only
// those recompute; for selective the modules' matmuls — the attention core's forward, MLA's
// up-projections — or with the op-level policy the recomputed matmuls). Materialized attention (the default) executes the full square, so without
// recompute hardware FLOPs equal model FLOPs.
double hardware_flops_per_step(const ModelSpec& m, int64_t seq_len, int64_t global_batch,
                               Recompute recompute,
                               SelectiveRecompute selective = SelectiveRecompute::kAttentionCore,
                               AttentionKernel kernel = AttentionKernel::kMaterialized, double recompute_fraction = 1,
                               unsigned recompute_modules = kCoreAttn);
// Weights of the matmuls the op-level policy re-runs, per layer: every second matmul in call order
// (Q, K, V, O, then gate, up, down or FC1, FC2) is recomputed up to the last one whose output the
// backward needs: K and O, and up for a gated MLP.
int64_t ops_recomputed_matmul_weights(const ModelSpec& m);

// One GEMM of a layer's forward pass on one TP rank: `batch` independent M x N x K products. A
// grouped GEMM's experts hold ragged rows: M is their mean and `m_sd` their spread, which makes
// the row tiles executed their expectation rather than M's (simulator/compute_cost.h).
struct Gemm {
  const char* name;
  int64_t m, n, k;
  int64_t batch = 1;
  double m_sd = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * n * k * batch; }
};
// The backward of a forward GEMM Y = X W (M x N, reduced over K) is two GEMMs of the same FLOPs:
// dX = dY W^T (M x K over N, the rows as ragged) and dW = X^T dY (K x N over M, ragged only in
// the reduction).
inline Gemm input_gradient_gemm(const Gemm& g) { return {g.name, g.m, g.k, g.n, g.batch, g.m_sd}; }
inline Gemm weight_gradient_gemm(const Gemm& g) { return {g.name, g.k, g.n, g.m, g.batch}; }

// The forward GEMMs of one layer for a micro-batch of b sequences of length s on TP degree t
// (attention core included, as batched GEMMs over heads). Backward runs two GEMMs of the same size
// per forward GEMM (see above). MoE experts assume tokens are spread evenly over experts.
std::vector<Gemm> layer_gemms(const ModelSpec& m, int64_t seq_len, int64_t micro_batch, int64_t tp);
// The same on one rank of a CP x EP plan: each CP rank's s / cp rows of every sequence (attention
// scores against all s keys); an EP rank's experts / ep experts split over expert TP `etp` (0:
// tp), their tokens the mean load times `expert_load` (the busiest EP rank's load over the mean;
// 1: balanced). Below tp, each rank dispatches its tp / etp share of the tokens. Unless padded to
// a capacity, an expert's rows are ragged: a count of independent choices (spread √rows) and the
// routing's spread `expert_spread` (a share of the mean rows; busiest_expert's σ).
struct GemmShape {
  int64_t seq_len = 1, micro_batch = 1, tp = 1, cp = 1, ep = 1;
  double expert_load = 1.0;
  int64_t etp = 0;
  bool ragged_experts = false;
  double expert_spread = 0;
};
std::vector<Gemm> layer_gemms(const ModelSpec& m, const GemmShape& shape);

// Bytes read + written by the memory-bound kernels (norms, residuals, activation function, RoPE,
// dropout, and for materialized attention the softmax over scores) of one layer's forward, per
// token, per TP rank. Backward kernels move about 1.5 x as much (estimate.cc).
double layer_elementwise_bytes_per_token(const ModelSpec& m, int64_t seq_len, int64_t tp,
                                         bool sequence_parallel, AttentionKernel kernel,
                                         KernelFusion fusion = KernelFusion::kFused);

struct ActivationOptions {
  int64_t seq_len = 0;
  int64_t micro_batch = 1;
  int64_t tp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  AttentionKernel attention = AttentionKernel::kMaterialized;
  SelectiveRecompute selective = SelectiveRecompute::kAttentionCore;
  unsigned modules = kCoreAttn;  // what kAttentionCore's policy re-runs (RecomputeModule bits)
  int64_t cp = 1;     // context parallelism: each rank keeps s / cp of every sequence
  bool fp8 = false;   // FP8 GEMMs save their inputs' 1-byte casts (Transformer Engine)
  double recompute_fraction = 1;  // full recompute on this share of the layers, none on the rest
};

// Activation bytes one layer keeps per micro-batch on one GPU until its backward.
struct LayerActivations {
  double attention = 0;  // incl. the input of the QKV projection and the post-attention dropout
  double mlp = 0;
  double norms = 0;      // inputs of the two norms
  // Of mlp, MoE: what the routed experts keep (their tokens' copies and activations), which on an
  // EP rank grows with the tokens routed to its experts.
  double routed = 0;
  double total() const { return attention + mlp + norms; }
};
// With full recompute on a share f of the layers: the mean over layers, f x full + (1 - f) x none.
LayerActivations layer_activation_bytes(const ModelSpec& m, const ActivationOptions& o);

// Activation bytes outside the layers for one micro-batch on one GPU: the embedding's dropout
// mask (first stage) and the final norm, output projection input and fp32 cross-entropy logits
// (last stage).
double first_stage_extra_activation_bytes(const ModelSpec& m, const ActivationOptions& o);
double last_stage_extra_activation_bytes(const ModelSpec& m, const ActivationOptions& o);

}  // namespace parallax
