// ModelSpec: what is trained — the shape of a decoder-only transformer, read from a Hugging Face
// config.json exactly as published (GPT-2, Llama, Mistral, Mixtral, Qwen2, Nemotron, ...; the readers
// are model_spec.cc and read_*.cc, one per family of key names). It is the first of the
// three inputs (model, cluster, plan); layer_cost.h turns it into parameters, FLOPs and bytes.
// Mixture-of-experts models (Mixtral, Qwen2-MoE, DeepSeek-V2/V3, Llama 4) may have dense layers
// (DeepSeek's leading first_k_dense_replace, Qwen's decoder_sparse_step and mlp_only_layers, Llama
// 4's interleave_moe_layer_step); dense_layer_model() is the spec of those layers.
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
  // Biases, by the linears that carry them (norm biases are norm_bias). linear_bias: every linear
  // (GPT-2, GPT-NeoX, StarCoder2), and implies the three below; otherwise each is its own: Q, K, V
  // (Qwen2, StableLM's use_qkv_bias, Qwen v1), O (Llama's attention_bias adds it with Q, K, V, as
  // InternLM's bias does), the MLP's linears (Llama's and Granite's mlp_bias, GPT-J's FC1/FC2).
  bool linear_bias = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool lm_head_bias = false;  // the output head's V biases (GPT-J, phi-1.5/phi-2)
  int64_t experts = 1;            // Mixtral: num_local_experts
  int64_t experts_per_token = 1;  // Mixtral: num_experts_per_tok (top-k)
  // Shared experts every token passes through beside its routed ones (Qwen2-MoE, DeepSeek): their
  // summed FFN width, a dense SwiGLU MLP; Qwen2-MoE gates it with a sigmoid of one h-vector.
  int64_t shared_ffn_hidden = 0;
  bool shared_expert_gate = false;
  bool router_bias = false;  // DeepSeek-V3: a per-expert score correction bias (noaux_tc routing)
  // The first `dense_layers` layers have a dense MLP of width dense_ffn_hidden (DeepSeek's
  // first_k_dense_replace and intermediate_size); the rest are MoE layers, unless
  // moe_layer_step > 1: then layer i is MoE only when (i + 1) % moe_layer_step == 0, every k-th
  // layer from layer k - 1, as Qwen2-MoE's decoder_sparse_step (modeling_qwen2_moe.py) and Llama
  // 4's interleave_moe_layer_step (configuration_llama4.py: moe_layers = range(step - 1, L, step))
  // place them; layers in mlp_only_layers (Qwen's key, 0-based, sorted) are dense whatever the step.
  int64_t dense_layers = 0;
  int64_t dense_ffn_hidden = 0;
  int64_t moe_layer_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // Multi-token prediction (DeepSeek-V3's num_nextn_predict_layers; Megatron's --mtp-num-layers):
  // each depth, on the last pipeline stage, normalizes the hidden state and the next token's
  // embedding, projects their concatenation 2h -> h (eh_proj), runs one more transformer layer of
  // the model's last kind and the shared output head and loss again (DeepSeek-V3 report, 2.2;
  // Megatron-Core multi_token_prediction.py: every depth on the last stage, which then also holds
  // a copy of the embedding).
  int64_t mtp_layers = 0;
  // Chunked local attention (Llama 4's attention_chunk_size on its RoPE layers): named in
  // `unpriced` (priced as full causal attention); 0 when absent.
  int64_t attention_chunk = 0;
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

  // What a training framework must be told beyond the shape, so that an export (planner/export*)
  // trains the model the config describes; none of it changes the price. Read by
  // read_training_recipe() (model_spec.cc); absent keys take the type's Hugging Face defaults.
  struct Recipe {
    std::string router_score = "softmax";  // scoring_func: softmax or sigmoid (DeepSeek-V3)
    bool router_norm_topk = true;          // norm_topk_prob: the top-k weights renormalised
    int64_t router_groups = 0;             // n_group: group-limited routing when > 1 ...
    int64_t router_group_topk = 0;         // ... over topk_group groups (DeepSeek-V2/V3)
    double router_scaling = 1.0;           // routed_scaling_factor
    double aux_loss_coef = 0.0;            // router_aux_loss_coef, or DeepSeek's aux_loss_alpha
    bool seq_aux_loss = false;             // DeepSeek's seq_aux: the balance loss per sequence
    std::string rope_scaling;              // rope_scaling's rope_type ("llama3", "yarn", ...); "" none
    double rope_factor = 1.0, rope_low_freq = 1.0, rope_high_freq = 4.0;  // llama3
    double rope_beta_fast = 32.0, rope_beta_slow = 1.0, rope_mscale = 1.0, rope_mscale_all_dim = 0.0;  // yarn
    int64_t rope_original_positions = 0;   // original_max_position_embeddings
  } recipe;

  bool has_qkv_bias() const { return linear_bias || qkv_bias; }
  bool has_o_bias() const { return linear_bias || o_bias; }
  bool has_mlp_bias() const { return linear_bias || mlp_bias; }

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t v_dim() const { return kv_heads * v_head_dim; }  // V's width
  int64_t o_dim() const { return heads * v_head_dim; }     // the attention output, O's input
  bool is_moe() const { return experts > 1; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Whether layer i (0-based) has a dense MLP (dense_ffn_hidden) rather than the model's own kind.
  bool is_dense_layer(int64_t i) const;
  // The dense layers among [first, first + count), and in the whole model.
  int64_t dense_layers_in(int64_t first, int64_t count) const;
  int64_t dense_layer_count() const { return dense_layers_in(0, layers); }
  bool has_dense_layers() const { return dense_layer_count() > 0; }
  bool gated_mlp() const { return mlp == Mlp::kSwiGlu; }
};

// The spec of a dense layer of an MoE model (experts 1, the dense FFN width); `m` itself when it
// has none.
ModelSpec dense_layer_model(const ModelSpec& m);

// Reads a Hugging Face config.json object; `where` names the source in error messages. A
// multimodal config (LLaVA, Mistral 3, Gemma 3) is read as its language model, `text_config`,
// and its vision encoder is named in `unpriced`. A key that would change parameters, FLOPs or
// memory but that the model's reader does not read is an error naming it, never a silent default.
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
