// ModelSpec: what is trained — the shape of a decoder-only transformer, read from a Hugging Face
// config.json exactly as published (GPT-2, Llama, Mistral, Mixtral, Qwen2, Nemotron). It is the first of the
// three inputs (model, cluster, plan); layer_cost.h turns it into parameters, FLOPs and bytes.
// Mixture-of-experts models (Mixtral, Qwen2-MoE, DeepSeek-V2/V3) may lead with dense layers
// (DeepSeek's first_k_dense_replace); dense_layer_model() is the spec of those layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/status.h"

namespace parallax {

enum class Norm { kLayerNorm, kRmsNorm };
// GELU and squared ReLU (Nemotron's relu2, max(x, 0)^2): h->f->h; SwiGLU: h->2f (gate, up) -> f -> h.
enum class Mlp { kGelu, kSwiGlu, kSquaredRelu };
enum class Positions { kLearned, kRotary };  // learned: an s_max x h table on the first stage

struct ModelSpec {
  std::string name;        // the file's stem, e.g. "13b"; else the model_type
  std::string model_type;  // as in config.json: gpt2, llama, mistral, mixtral, qwen2, nemotron
  Norm norm = Norm::kRmsNorm;
  Mlp mlp = Mlp::kSwiGlu;
  Positions positions = Positions::kRotary;

  int64_t hidden = 0;       // h
  int64_t ffn_hidden = 0;   // f, per expert for MoE
  int64_t layers = 0;       // L
  int64_t heads = 0;        // a
  int64_t kv_heads = 0;     // k (= a without GQA)
  int64_t head_dim = 0;     // h / a unless the config says otherwise
  int64_t vocab = 0;        // V
  int64_t max_positions = 0;
  bool tied_embeddings = false;
  bool linear_bias = false;  // GPT-2: every linear and norm has a bias
  bool qkv_bias = false;     // Qwen2 / attention_bias: only Q, K, V projections have a bias
  int64_t experts = 1;            // Mixtral: num_local_experts
  int64_t experts_per_token = 1;  // Mixtral: num_experts_per_tok (top-k)
  // Shared experts every token passes through beside its routed ones (Qwen2-MoE, DeepSeek): their
  // summed FFN width, a dense SwiGLU MLP; Qwen2-MoE gates it with a sigmoid of one h-vector.
  int64_t shared_ffn_hidden = 0;
  bool shared_expert_gate = false;
  bool router_bias = false;  // DeepSeek-V3: a per-expert score correction bias (noaux_tc routing)
  // The first `dense_layers` layers have a dense MLP of width dense_ffn_hidden (DeepSeek's
  // first_k_dense_replace and intermediate_size); the rest are MoE layers.
  int64_t dense_layers = 0;
  int64_t dense_ffn_hidden = 0;
  // Multi-head latent attention (DeepSeek-V2/V3), when kv_lora_rank > 0: K and V come up from a
  // kv_lora_rank latent (plus a shared qk_rope_dim rotary key), Q from a q_lora_rank latent (0:
  // directly from h). head_dim is the Q/K head (nope + rope dimensions), v_head_dim V's.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_rope_dim = 0;
  int64_t v_head_dim = 0;         // = head_dim unless the config says otherwise
  bool dropout = false;           // any dropout > 0: 1-byte masks are stored (Korthikanti)
  double rope_theta = 10000.0;    // rotary base (Hugging Face's default when absent)
  // Leading dimensions of each head that rotate: head_dim, or int(head_dim * partial_rotary_factor)
  // (Nemotron: half); the rest pass through unrotated.
  int64_t rotary_dims = 0;
  double norm_eps = 1e-5;         // rms_norm_eps (Llama family) or layer_norm_epsilon (GPT-2)
  // Architecture details beyond Llama's (Gemma, Qwen3, OLMo, Cohere, GPT-NeoX, ...):
  int64_t norms_per_layer = 2;    // Gemma 2/3: 4 (sandwich norms); Cohere: 1 (parallel block)
  bool norm_bias = false;         // LayerNorm with a bias (GPT-2, GPT-NeoX, StableLM, Nemotron)
  bool norm_affine = true;        // OLMo 1: non-parametric LayerNorm (no weights)
  int64_t qk_norm_params = 0;     // per layer: Qwen3/Gemma 3 per-head q/k norms (2 head_dim), OLMo 2 (q_dim + kv_dim)
  bool parallel_block = false;    // attention and MLP read the same input (GPT-NeoX, GPT-J, Cohere)
  std::string hidden_act = "silu";  // the MLP's activation as the config names it
  // What the config has that Parallax prices as if absent (soft-capping, sliding windows, ...),
  // named so that reports and the runtimes can say so.
  std::vector<std::string> unpriced;

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t v_dim() const { return kv_heads * v_head_dim; }  // V's width
  int64_t o_dim() const { return heads * v_head_dim; }     // the attention output, O's input
  bool is_moe() const { return experts > 1; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Layers [0, dense_layers) are dense; the others are the model's own kind.
  int64_t dense_layers_in(int64_t first, int64_t count) const {
    const int64_t end = first + count < dense_layers ? first + count : dense_layers;
    return end > first ? end - first : 0;
  }
  bool gated_mlp() const { return mlp == Mlp::kSwiGlu; }
};

// The spec of a leading dense layer of an MoE model (experts 1, the dense FFN width); `m` itself
// when it has none.
ModelSpec dense_layer_model(const ModelSpec& m);

// Reads a Hugging Face config.json object; `where` names the source in error messages.
Result<ModelSpec> model_from_hf_config(const nlohmann::json& config, const std::string& where);

// Reads a model file. `name_or_path` is a path, or a name found as models/NAME.json in the data
// directory (PARALLAX_DATA_DIR, else the source tree).
Result<ModelSpec> load_model(const std::string& name_or_path);

// Where bundled data lives: $PARALLAX_DATA_DIR if set, else the source tree.
std::string data_dir();

// Resolves `name_or_path` against `subdir` of data_dir(): "13b", "13b.json", "models/13b.json".
std::string resolve_data_file(const std::string& name_or_path, const std::string& subdir);
// The error for a name that is neither a file nor bundled: "unknown model '13c' (not a file;
// bundled: 13b, gpt2, ...; closest: 13b)". "" when `name_or_path` looks like a path (it has a
// '/') or exists, so the reader reports what is wrong with it.
std::string unknown_data_file(const std::string& name_or_path, const std::string& subdir, const std::string& kind);

}  // namespace parallax
