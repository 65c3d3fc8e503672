// What Megatron-LM's command line cannot express about a model (ModelSpec alone), one line: the
// planner's framework_refusal (program/framework.cc) lists no plan for megatron/nemo whose
// `--emit megatron` (planner/export_megatron.cc) would refuse it, and the exporter calls the same
// function. Each rule as NVIDIA/Megatron-LM@d98e8a64 (2026-08) spells it:
// megatron/training/arguments.py, megatron/core/transformer/transformer_config.py.
#include <cmath>
#include <string>

#include "program/framework.h"

namespace parallax {

namespace {

// The MLP's activation: Megatron's command line has GELU (the default), --swiglu (SiLU-gated),
// --squared-relu and --quick-geglu (x * sigmoid(1.702 x), gated); gated_linear_unit itself is not
// an argument (arguments.py _add_network_size_args excludes it), so a gated GELU cannot be asked for.
std::string activation_refusal(const ModelSpec& m) {
  const std::string& act = m.hidden_act;
  if (m.mlp == Mlp::kSwiGlu && act != "silu" && act != "swish")
    return m.name + "'s gated MLP uses " + act + " (GeGLU), but Megatron-LM's command line gates only SiLU (--swiglu) or "
           "quick-GELU (--quick-geglu, x*sigmoid(1.702x)); gated_linear_unit is not an argument";
  if (m.mlp == Mlp::kGelu && act.find("gelu") == std::string::npos)
    return m.name + "'s MLP uses " + act + ", which Megatron-LM's command line cannot select (GELU, SwiGLU, squared ReLU)";
  return "";
}

// Rotary scaling: Llama 3's is --use-rope-scaling with --rope-scaling-factor; Megatron fixes its
// other constants (low_freq_factor 1, high_freq_factor 4, original 8192 positions:
// megatron/core/models/common/embeddings/rotary_pos_embedding.py _apply_scaling).
std::string rope_refusal(const ModelSpec& m) {
  const ModelSpec::Recipe& r = m.recipe;
  if (r.rope_scaling.empty() || r.rope_scaling == "default") return "";
  if (r.rope_scaling == "llama3") {
    if (r.rope_low_freq != 1.0 || r.rope_high_freq != 4.0 || (r.rope_original_positions != 0 && r.rope_original_positions != 8192))
      return "llama3 rope scaling other than low_freq_factor 1, high_freq_factor 4 and 8192 original positions is fixed "
             "in Megatron-LM's rotary_pos_embedding.py";
    return "";
  }
  // YaRN: Megatron's MLA takes only the factor and mscales from the command line; its
  // original_max_position_embeddings (4096) and beta_fast/slow (32, 1) are MLATransformerConfig
  // defaults (transformer_config.py), DeepSeek-V2/V3's own values.
  if (r.rope_scaling == "yarn") {
    if (m.is_mla() && ((r.rope_original_positions != 0 && r.rope_original_positions != 4096) || r.rope_beta_fast != 32.0 ||
                       r.rope_beta_slow != 1.0))
      return "yarn with latent attention other than 4096 original positions and beta 32/1 (MLATransformerConfig's "
             "defaults, not command-line arguments)";
    return "";
  }
  // Dynamic NTK scaling changes the base only past max_position_embeddings (transformers'
  // _compute_dynamic_ntk_parameters), beyond any sequence Megatron trains (max positions >= seq).
  if (r.rope_scaling == "dynamic" && (r.rope_original_positions == 0 || r.rope_original_positions >= m.max_positions)) return "";
  // --rotary-seq-len-interpolation-factor is an int (position interpolation by a whole factor).
  if (r.rope_scaling == "linear" && r.rope_factor == std::floor(r.rope_factor)) return "";
  return "rope_scaling '" + r.rope_scaling + "' has no Megatron-LM GPT argument (llama3, yarn, dynamic within the trained length, or linear by a whole factor)";
}

// The router: Megatron renormalises a sigmoid top-k (moe_utils.py topk_routing_with_score_function)
// and refuses a softmax top-1 after the top-k (transformer_config.py: "use --moe-router-pre-softmax").
std::string router_refusal(const ModelSpec& m) {
  const ModelSpec::Recipe& r = m.recipe;
  if (!m.is_moe()) return "";
  if (r.router_score == "sigmoid" && !r.router_norm_topk && m.experts_per_token > 1)
    return "a sigmoid router without norm_topk_prob: Megatron-LM renormalises the top-k sigmoid scores";
  if (r.router_score == "softmax" && r.router_norm_topk && m.experts_per_token == 1)
    return "a top-1 softmax router renormalised over its one expert: Megatron-LM needs --moe-router-pre-softmax for top-1";
  if (r.router_groups > 1 && (m.experts % r.router_groups != 0 || r.router_group_topk > r.router_groups))
    return "group-limited routing needs n_group to divide the experts and topk_group <= n_group";
  return "";
}

// Biases Megatron can state: all linears (its default) or none (--disable-bias-linear), plus Q, K,
// V alone (--add-qkv-bias); the output head never has one.
bool all_linear_biases(const ModelSpec& m) { return m.has_qkv_bias() && m.has_o_bias() && m.has_mlp_bias(); }
std::string bias_refusal(const ModelSpec& m) {
  if (!all_linear_biases(m) && (m.has_o_bias() || m.has_mlp_bias()))
    return std::string("a bias on ") + (m.has_o_bias() ? "O" : "the MLP") + " without one on every linear: Megatron-LM's "
           "--add-qkv-bias covers Q, K and V only";
  if (m.lm_head_bias) return "an output-head bias, which Megatron-LM's output layer does not have";
  return "";
}

// Megatron's GPT layer: attention then MLP (not in parallel as in GPT-J, GPT-NeoX's
// use_parallel_residual, Cohere), each behind one norm with weights (not Gemma 2/3's sandwich
// norms or OLMo's non-parametric LayerNorm), q/k norms per head (--qk-layernorm: 2 x head_dim
// weights, not OLMo 2's over the whole projections).
std::string block_refusal(const ModelSpec& m) {
  if (m.parallel_block) return "attention and MLP in parallel (one residual), which Megatron-LM's GPT layer runs in sequence";
  if (m.norms_per_layer != 2) return std::to_string(m.norms_per_layer) + " norms per layer; Megatron-LM's GPT layer has 2";
  if (!m.norm_affine) return "a LayerNorm without weights, which Megatron-LM's norms always have";
  if (m.qk_norm_params > 0 && m.qk_norm_params != 2 * m.head_dim * (m.norm_bias ? 2 : 1))
    return "q/k norms over the whole projections; Megatron-LM's --qk-layernorm normalises each head";
  // Llama 4's chunked local attention: arguments.py has no attention-chunk argument.
  if (m.attention_chunk > 0)
    return "chunked local attention (attention_chunk_size " + std::to_string(m.attention_chunk) + "), which Megatron-LM's command line cannot set";
  return "";
}

}  // namespace

std::string megatron_model_refusal(const ModelSpec& m) {
  for (std::string why : {activation_refusal(m), block_refusal(m), rope_refusal(m), router_refusal(m), bias_refusal(m)})
    if (!why.empty()) return why;
  return "";
}

}  // namespace parallax
