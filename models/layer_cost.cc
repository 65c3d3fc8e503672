#include "models/layer_cost.h"

#include <algorithm>
#include <cmath>

namespace parallax {

namespace {
double d(int64_t x) { return static_cast<double>(x); }
int64_t mlp_width(const ModelSpec& m) { return m.mlp == Mlp::kSwiGlu ? 2 * m.ffn_hidden : m.ffn_hidden; }
int64_t mlp_matmuls(const ModelSpec& m) { return m.mlp == Mlp::kSwiGlu ? 3 : 2; }
int64_t norm_params(const ModelSpec& m) { return !m.norm_affine ? 0 : m.norm_bias ? 2 * m.hidden : m.hidden; }

// Sums f(layer spec) over the model's layers: its dense layers (leading or interleaved), then the
// rest, and the multi-token-prediction depths' layers (of the rest's kind).
template <typename F>
double over_layers(const ModelSpec& m, F f) {
  const int64_t dense = m.dense_layer_count();
  return (dense > 0 ? d(dense) * f(dense_layer_model(m)) : 0.0) + d(m.layers - dense + m.mtp_layers) * f(m);
}

// Per token, what multi-token prediction adds outside its layers: each depth's eh_proj (2h x h)
// and its pass through the output head, forward and backward (3 x 2 FLOPs per weight).
double mtp_head_flops_per_token(const ModelSpec& m) {
  return d(m.mtp_layers) * 6.0 * (2.0 * d(m.hidden) * d(m.hidden) + d(m.hidden) * d(m.vocab));
}

// The attention projections' weights by how TP treats them. Multi-head latent attention: the
// down-projections into the latents (h -> q_lora_rank, h -> kv_lora_rank + the shared rotary key)
// are replicated over TP, as Megatron-Core builds them; the up-projections and O are split.
struct AttentionWeights {
  int64_t sharded = 0, replicated = 0;
};
AttentionWeights attention_weights(const ModelSpec& m) {
  const int64_t h = m.hidden;
  if (!m.is_mla()) return {h * (m.q_dim() + m.kv_dim() + m.v_dim() + m.o_dim()), 0};
  const int64_t q = m.q_lora_rank > 0 ? m.q_lora_rank * m.q_dim() : h * m.q_dim();
  const int64_t kv_up = m.kv_lora_rank * (m.heads * (m.head_dim - m.qk_rope_dim) + m.o_dim());
  const int64_t down = (m.q_lora_rank > 0 ? h * m.q_lora_rank : 0) + h * (m.kv_lora_rank + m.qk_rope_dim);
  return {q + kv_up + m.o_dim() * h, down};
}

}  // namespace

LayerParams layer_params(const ModelSpec& m) {
  LayerParams p;
  const int64_t h = m.hidden, f = m.ffn_hidden;
  const AttentionWeights aw = attention_weights(m);
  p.tp_sharded += aw.sharded;
  p.replicated += aw.replicated;
  if (m.is_mla()) p.replicated += m.q_lora_rank + m.kv_lora_rank;  // the latents' RMSNorms
  if (m.is_moe()) {
    p.expert = m.experts * mlp_matmuls(m) * h * f;
    p.tp_sharded += mlp_matmuls(m) * h * m.shared_ffn_hidden;
    p.replicated += (h + (m.router_bias ? 1 : 0)) * m.experts + (m.shared_expert_gate ? h : 0);  // router, shared-expert gate
  } else {
    p.tp_sharded += mlp_matmuls(m) * h * f;
  }
  // Column-parallel biases (Q, K, V; FC1, or gate and up) are split by TP, row-parallel ones (O,
  // FC2) are added after the reduction and replicated.
  if (m.has_qkv_bias()) p.tp_sharded += m.q_dim() + m.kv_dim() + m.v_dim();
  if (m.has_o_bias()) p.replicated += h;
  if (m.has_mlp_bias()) {
    p.tp_sharded += mlp_width(m);
    p.replicated += h;
  }
  p.replicated += m.norms_per_layer * norm_params(m) + m.qk_norm_params;
  return p;
}

EdgeParams edge_params(const ModelSpec& m) {
  EdgeParams e;
  e.token_embedding = m.vocab * m.hidden;
  if (m.positions == Positions::kLearned) e.position_embedding = m.max_positions * m.hidden;
  if (!m.tied_embeddings) e.output_head = m.vocab * m.hidden;
  if (m.lm_head_bias) e.output_head += m.vocab;  // vocab-parallel like the head's weights
  e.final_norm = norm_params(m);
  return e;
}

LayerParams mtp_params(const ModelSpec& m) {
  LayerParams p = layer_params(m);
  p.tp_sharded += 2 * m.hidden * m.hidden;  // eh_proj
  p.replicated += 3 * norm_params(m);       // enorm, hnorm, the final norm
  return {m.mtp_layers * p.tp_sharded, m.mtp_layers * p.replicated, m.mtp_layers * p.expert};
}

int64_t total_params(const ModelSpec& m) {
  const EdgeParams e = edge_params(m);
  const int64_t dense = m.dense_layer_count();
  const int64_t layers = dense * layer_params(dense_layer_model(m)).total() + (m.layers - dense) * layer_params(m).total();
  return layers + mtp_params(m).total() + e.token_embedding + e.position_embedding + e.output_head + e.final_norm;
}

int64_t active_matmul_weights_per_layer(const ModelSpec& m) {
  const AttentionWeights aw = attention_weights(m);
  int64_t w = aw.sharded + aw.replicated;
  w += (m.experts_per_token * m.ffn_hidden + m.shared_ffn_hidden) * mlp_matmuls(m) * m.hidden;
  if (m.is_moe()) w += m.hidden * m.experts;
  return w;
}

double attention_core_flops_per_token(const ModelSpec& m, int64_t seq_len) {
  // QK^T: 2*s*head_dim per head, AV: 2*s*v_head_dim; over a heads 2s(q_dim + o_dim), which is
  // 4*s*q_dim unless V's heads differ (MLA).
  return 2.0 * d(seq_len) * d(m.q_dim() + m.o_dim());
}

PassFlops layer_flops_per_token(const ModelSpec& m, int64_t seq_len) {
  const double matmul = 2.0 * d(active_matmul_weights_per_layer(m));
  const double core = attention_core_flops_per_token(m, seq_len);
  PassFlops p;
  p.forward = matmul + core;
  // Each weight GEMM's backward is two GEMMs of its size (dX and dW); the attention core has no
  // weights, so both of its backward products are input gradients.
  p.backward_input = matmul + 2.0 * core;
  p.backward_weight = matmul;
  return p;
}

PassFlops logits_flops_per_token(const ModelSpec& m) {
  const double fwd = 2.0 * d(m.hidden) * d(m.vocab);
  return {fwd, fwd, fwd};
}

double model_flops_per_step(const ModelSpec& m, int64_t seq_len, int64_t global_batch) {
  const PassFlops logits = logits_flops_per_token(m);
  const double per_token = over_layers(m, [&](const ModelSpec& l) {
                             const PassFlops p = layer_flops_per_token(l, seq_len);
                             return p.forward + p.backward();
                           }) + logits.forward + logits.backward() + mtp_head_flops_per_token(m);
  return per_token * d(seq_len) * d(global_batch);
}

int64_t ops_recomputed_matmul_weights(const ModelSpec& m) {
  const int64_t up = m.gated_mlp() ? m.experts_per_token * m.hidden * m.ffn_hidden : 0;
  return m.hidden * m.kv_dim() + m.q_dim() * m.hidden + up;
}

double attention_executed_fraction(int64_t seq_len, AttentionKernel kernel) {
  if (kernel == AttentionKernel::kMaterialized) return 1.0;
  constexpr int64_t kTile = 128;
  const double n = d((seq_len + kTile - 1) / kTile);
  return (n + 1.0) / (2.0 * n);
}

int64_t mla_up_proj_weights(const ModelSpec& m) {
  if (!m.is_mla()) return 0;
  const int64_t kv_up = m.kv_lora_rank * m.heads * (m.head_dim - m.qk_rope_dim + m.v_head_dim);
  return kv_up + (m.q_lora_rank > 0 ? m.q_lora_rank * m.q_dim() : 0);
}

double hardware_flops_per_step(const ModelSpec& m, int64_t seq_len, int64_t global_batch,
                               Recompute recompute, SelectiveRecompute selective, AttentionKernel kernel,
                               double recompute_fraction, unsigned recompute_modules) {
  const bool flash = kernel == AttentionKernel::kFlash;
  const double share = attention_executed_fraction(seq_len, kernel);
  const double per_token = over_layers(m, [&](const ModelSpec& l) {
    const PassFlops p = layer_flops_per_token(l, seq_len);
    const double core = attention_core_flops_per_token(l, seq_len);  // forward, full square
    // Model FLOPs count the core 3 times over the whole square (forward, and 2 x in the backward).
    const double run_core = share * core * (flash ? 3.5 : 3.0);
    double layer = p.forward + p.backward() - 3.0 * core + run_core;
    if (recompute == Recompute::kFull) layer += recompute_fraction * (p.forward - core + share * core);
    if (recompute == Recompute::kSelective && selective == SelectiveRecompute::kOps)
      layer += 2.0 * d(ops_recomputed_matmul_weights(l));
    else if (recompute == Recompute::kSelective)
      layer += ((recompute_modules & kCoreAttn) ? share * core : 0.0) +
               ((recompute_modules & kMlaUpProj) ? 2.0 * d(mla_up_proj_weights(l)) : 0.0);
    return layer;
  });
  const PassFlops logits = logits_flops_per_token(m);
  return (per_token + logits.forward + logits.backward() + mtp_head_flops_per_token(m)) * d(seq_len) * d(global_batch);
}

std::vector<Gemm> layer_gemms(const ModelSpec& m, int64_t seq_len, int64_t micro_batch, int64_t tp) {
  return layer_gemms(m, GemmShape{seq_len, micro_batch, tp});
}

std::vector<Gemm> layer_gemms(const ModelSpec& m, const GemmShape& s) {
  const int64_t tp = s.tp, rows = s.seq_len / s.cp;  // CP: each rank holds s / cp of every sequence
  const int64_t tokens = rows * s.micro_batch, h = m.hidden;
  const int64_t heads = m.heads / tp;
  std::vector<Gemm> g;
  if (m.is_mla()) {
    if (m.q_lora_rank > 0) g.push_back({"q_down", tokens, m.q_lora_rank, h});
    g.push_back({"q", tokens, m.q_dim() / tp, m.q_lora_rank > 0 ? m.q_lora_rank : h});
    g.push_back({"kv_down", tokens, m.kv_lora_rank + m.qk_rope_dim, h});
    g.push_back({"kv_up", tokens, m.heads * (m.head_dim - m.qk_rope_dim + m.v_head_dim) / tp, m.kv_lora_rank});
  } else {
    g.push_back({"qkv", tokens, (m.q_dim() + m.kv_dim() + m.v_dim()) / tp, h});
  }
  g.push_back({"scores", rows, s.seq_len, m.head_dim, s.micro_batch * heads});
  g.push_back({"attn_v", rows, m.v_head_dim, s.seq_len, s.micro_batch * heads});
  g.push_back({"proj", tokens, h, m.o_dim() / tp});
  if (m.is_moe()) {
    g.push_back({"router", tokens, m.experts, h});
    // Each EP rank holds experts / ep experts and receives, on average, its tokens x top-k; the
    // busiest rank (expert_load x the mean) sets the pace of the grouped GEMM.
    const int64_t local = m.experts / s.ep, etp = s.etp > 0 ? s.etp : tp;
    const double routed = d(tokens) * d(m.experts_per_token) * s.expert_load / d(tp / etp);
    const int64_t per_expert = std::max<int64_t>(1, static_cast<int64_t>(std::llround(routed / d(local))));
    const double mean_rows = routed / s.expert_load / d(local);
    const double sd = s.ragged_experts ? std::sqrt(d(per_expert) + std::pow(s.expert_spread * mean_rows, 2)) : 0.0;
    g.push_back({"fc1", per_expert, mlp_width(m) / etp, h, local, sd});
    g.push_back({"fc2", per_expert, h, m.ffn_hidden / etp, local, sd});
    if (m.shared_ffn_hidden > 0) {
      const int64_t shared_width = m.gated_mlp() ? 2 * m.shared_ffn_hidden : m.shared_ffn_hidden;
      g.push_back({"shared_fc1", tokens, shared_width / tp, h});
      g.push_back({"shared_fc2", tokens, h, m.shared_ffn_hidden / tp});
    }
  } else {
    g.push_back({"fc1", tokens, mlp_width(m) / tp, h});
    g.push_back({"fc2", tokens, h, m.ffn_hidden / tp});
  }
  return g;
}

double layer_elementwise_bytes_per_token(const ModelSpec& m, int64_t seq_len, int64_t tp,
                                         bool sequence_parallel, AttentionKernel kernel, KernelFusion fusion) {
  const double h = d(m.hidden), t = d(tp), rep = sequence_parallel ? t : 1.0;
  const double routed = d(m.experts_per_token);
  // Rotary dimensions of q and k per token (MLA rotates rope dimensions of each q head and one
  // shared rotary key).
  const double qk = m.is_mla() ? d(m.heads * m.qk_rope_dim + m.qk_rope_dim) : d(m.q_dim() + m.kv_dim());
  const bool eager = fusion == KernelFusion::kEager;
  // A fused norm reads 2h and writes 2h. Eager RMSNorm, x.float() * rsqrt(x.float().pow(2).mean()
  // + eps) cast back and times the weight: upcast r 2h w 4h, pow r 4h w 4h, mean r 4h, multiply
  // r 4h w 4h, cast r 4h w 2h, weight r 2h w 2h = 36h. PyTorch's LayerNorm is one kernel either way.
  const double norm = eager && m.norm == Norm::kRmsNorm ? 36 * h : 4 * h;
  double replicated = d(m.norms_per_layer) * norm + 12 * h;  // the norms; 2 residual adds (r 4h, w 2h)
  if (m.dropout) replicated += 10 * h;  // 2 hidden dropouts: r 2h, w 2h, mask h
  // SwiGLU fused: r 4f, w 2f; eager silu (r 2f, w 2f) then multiply (r 4f, w 2f): 10f. GELU and
  // squared ReLU: r 2f, w 2f.
  const double f = d(m.ffn_hidden);
  double parallel = (routed * f + d(m.shared_ffn_hidden)) * (m.gated_mlp() ? (eager ? 10.0 : 6.0) : 4.0);
  // MoE: the routed copies of each token are permuted into expert order and back (r 2kh, w 2kh
  // each way); MLA: the two latents' RMSNorms.
  if (m.is_moe()) replicated += 8 * routed * h;
  if (m.is_mla()) replicated += 4 * d(m.kv_lora_rank + m.q_lora_rank);
  // Rotary on q and k: fused r 2, w 2 per element; eager through complex fp32 — upcast r 2 w 4,
  // complex multiply r 4 w 4, cast back r 4 w 2 — 20 per element.
  if (m.positions == Positions::kRotary) parallel += (eager ? 20.0 : 4.0) * qk;
  if (eager) {
    // repeat_kv copies K and V to every query head (r 2kv, w 2q each) under GQA; the attention
    // output is transposed back by a copy (r 2q, w 2q).
    if (m.kv_heads != m.heads) parallel += 2 * (2 * d(m.kv_dim()) + 2 * d(m.q_dim()));
    parallel += 4 * d(m.q_dim());
  }
  if (kernel == AttentionKernel::kMaterialized) {
    const double scores = d(m.heads) * d(seq_len);  // a*s scores per token
    parallel += 4 * scores;                         // fused scale-mask-softmax: r 2, w 2
    if (m.dropout) parallel += 5 * scores;          // r 2, w 2, mask 1
  }
  return replicated / rep + parallel / t;
}

LayerActivations layer_activation_bytes(const ModelSpec& m, const ActivationOptions& o) {
  if (o.recompute == Recompute::kFull && o.recompute_fraction < 1) {
    ActivationOptions full = o, kept = o;
    full.recompute_fraction = kept.recompute_fraction = 1;
    kept.recompute = Recompute::kNone;
    const LayerActivations a = layer_activation_bytes(m, full), b = layer_activation_bytes(m, kept);
    const double f = o.recompute_fraction;
    return {f * a.attention + (1 - f) * b.attention, f * a.mlp + (1 - f) * b.mlp, f * a.norms + (1 - f) * b.norms,
            f * a.routed + (1 - f) * b.routed};
  }
  const double tokens = d(o.seq_len) / d(o.cp) * d(o.micro_batch);  // CP: s / cp per rank
  const double h = d(m.hidden), t = d(o.tp), rep = o.sequence_parallel ? t : 1.0;
  LayerActivations a;
  if (o.recompute == Recompute::kFull) {
    a.attention = 2 * h / rep * tokens;  // only the layer's input survives; counted here
    return a;
  }
  if (o.recompute == Recompute::kSelective && o.selective == SelectiveRecompute::kOps) {
    // Op-level policy: the layer input (2h), the saved matmul outputs Q (2q), V (2kv), gate or FC1
    // (2f per routed expert) and down projection (2h, before TP's reduction), and the attention
    // kernel's output (2q) with its fp32 log-sum-exp (4 per head).
    const double f = d(m.ffn_hidden) * d(m.experts_per_token) + d(m.shared_ffn_hidden);
    a.norms = 2 * h / rep * tokens;
    a.attention = (2 * d(m.q_dim()) + 2 * d(m.v_dim()) + 2 * d(m.o_dim()) + 4 * d(m.heads)) / t * tokens;
    a.mlp = (2 * f / t + 2 * h) * tokens;
    if (m.is_moe()) a.routed = 2 * d(m.ffn_hidden) * d(m.experts_per_token) / t * tokens;  // the saved FC1s
    return a;
  }
  const double mask = m.dropout ? 1.0 : 0.0;
  // Attention: QKV input 2h (replicated), Q and K 2q + 2kv, V 2v, projection input 2o, dropout
  // mask h (replicated). GPT (q = kv = v = o = h): 2h + 4h + 2h + 2h + h = 11h. MLA adds its
  // latents (kv_lora_rank + rope key, q_lora_rank) before and after their norms. FP8 (Transformer
  // Engine) saves the inputs of its GEMMs as their 1-byte casts: h of the QKV input, o of O's.
  double att_rep = 2 * h + mask * h;
  double att_par = 2 * d(m.q_dim()) + 2 * d(m.kv_dim()) + 2 * d(m.v_dim()) + 2 * d(m.o_dim());
  if (m.is_mla()) att_rep += 4 * d(m.kv_lora_rank + m.q_lora_rank) + 2 * d(m.qk_rope_dim);
  if (o.fp8) att_rep -= h, att_par -= d(m.o_dim());
  // Megatron's modules under selective recompute: what each re-runs is not kept (the attention
  // core's scores or log-sum-exp below; the norm output feeding QKV, 1 byte under FP8; MLA's
  // up-projected Q, K and V, recomputed from the latents kept above).
  const bool modules = o.recompute == Recompute::kSelective;
  if (modules && (o.modules & kLayernorm)) att_rep -= o.fp8 ? h : 2 * h;
  if (modules && (o.modules & kMlaUpProj) && m.is_mla()) att_par -= 2 * d(m.q_dim()) + 2 * d(m.kv_dim()) + 2 * d(m.v_dim());
  if (o.recompute == Recompute::kNone || (modules && !(o.modules & kCoreAttn))) {
    const double a_s = d(m.heads) * d(o.seq_len);
    if (o.attention == AttentionKernel::kMaterialized) {
      // softmax output 2as, dropout mask as and output 2as (Korthikanti's 5as); without dropout
      // AV reads the softmax output itself: 2as.
      att_par += m.dropout ? 5 * a_s : 2 * a_s;
    } else {
      att_par += 4 * d(m.heads);  // fp32 log-sum-exp per head
    }
  }
  // MLP: FC1 input 2h (replicated), activation input and output (GELU 2f + 2f; SwiGLU gate and up
  // 4f + output 2f) per routed and shared expert, dropout mask h (replicated). GPT: 2h + 16h + h =
  // 19h. FP8 saves the FC1 and FC2 inputs at 1 byte: h and f less.
  const double routed = d(m.experts_per_token), f = d(m.ffn_hidden) * routed + d(m.shared_ffn_hidden);
  double mlp_rep = 2 * h + mask * h;
  double mlp_par = m.mlp == Mlp::kSwiGlu ? 6 * f : 4 * f;
  if (m.is_moe()) mlp_rep += routed * 2 * h + 4 * d(m.experts);  // permuted tokens, fp32 router probs
  if (o.fp8) mlp_rep -= h, mlp_par -= f;
  if (modules && (o.modules & kLayernorm)) mlp_rep -= o.fp8 ? h : 2 * h;  // the norm output feeding FC1 (the router)
  // The routed experts' activation output, FC2's input (1 byte under FP8).
  if (modules && (o.modules & kMoeAct) && m.is_moe()) mlp_par -= d(m.ffn_hidden) * routed * (o.fp8 ? 1 : 2);
  a.attention = (att_rep / rep + att_par / t) * tokens;
  a.mlp = (mlp_rep / rep + mlp_par / t) * tokens;
  if (m.is_moe()) {
    // Of mlp_par, all but the shared experts' (per token, as the dense MLP's); and the permuted
    // copies of the tokens.
    const double shared_par = d(m.shared_ffn_hidden) * ((m.mlp == Mlp::kSwiGlu ? 6 : 4) - (o.fp8 ? 1 : 0));
    a.routed = ((mlp_par - shared_par) / t + routed * 2 * h / rep) * tokens;
  }
  a.norms = d(m.norms_per_layer) * 2 * h / rep * tokens;  // the inputs of the norms
  return a;
}

double first_stage_extra_activation_bytes(const ModelSpec& m, const ActivationOptions& o) {
  const double rep = o.sequence_parallel ? d(o.tp) : 1.0;
  return m.dropout ? d(o.seq_len) / d(o.cp) * d(o.micro_batch) * d(m.hidden) / rep : 0.0;
}

double last_stage_extra_activation_bytes(const ModelSpec& m, const ActivationOptions& o) {
  const double tokens = d(o.seq_len) / d(o.cp) * d(o.micro_batch);
  const double rep = o.sequence_parallel ? d(o.tp) : 1.0;
  // final norm input 2h, output projection input 2h, fp32 vocab-parallel logits 4V/t.
  const double head = tokens * (4 * d(m.hidden) / rep + 4 * d(m.vocab) / d(o.tp));
  if (m.mtp_layers == 0) return head;
  // Each multi-token-prediction depth: its layer, the inputs of enorm and hnorm (2h each) and of
  // eh_proj (the 4h concatenation), and the head's again.
  return head + d(m.mtp_layers) * (layer_activation_bytes(m, o).total() + tokens * 8 * d(m.hidden) / rep + head);
}

}  // namespace parallax
