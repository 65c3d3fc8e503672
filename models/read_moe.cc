// Readers of mixture-of-experts configs: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek (DeepSeek-MoE v1,
// V2, V3), Llama 4 (llama4_text) and MiniCPM-MoE. Each reads its attention as its dense relative does, then the experts.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "models/hf_readers.h"

namespace parallax::hf {

namespace {

void check_top_k(JsonFields& f, const ModelSpec& m, const char* experts_key) {
  if (f.ok() && m.experts_per_token > m.experts) f.fail("num_experts_per_tok", std::string("exceeds ") + experts_key);
}

// A list of 0-based layer indices (Qwen's mlp_only_layers, Llama 4's moe_layers), each checked
// to be a layer of the model; empty when absent.
std::vector<int64_t> read_layer_list(JsonFields& f, const char* key, int64_t layers) {
  std::vector<int64_t> out;
  if (!f.has(key)) return out;
  const nlohmann::json& list = f.object().at(key);
  if (!list.is_array()) {
    f.fail(key, "must be a list of layer indices");
    return out;
  }
  for (const nlohmann::json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers) {
      f.fail(key, "has " + v.dump() + ", not a layer index in [0, " + std::to_string(layers) + ")");
      return {};
    }
    out.push_back(v.get<int64_t>());
  }
  std::sort(out.begin(), out.end());  // ModelSpec::is_dense_layer searches it
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void check_some_moe_layer(JsonFields& f, const ModelSpec& m, const char* key) {
  if (f.ok() && m.dense_layer_count() >= m.layers) f.fail(key, "leaves no MoE layer");
}

// The routed experts of Qwen2MoeConfig and Qwen3MoeConfig: num_experts of moe_intermediate_size,
// top num_experts_per_tok. modeling_qwen2_moe.py / modeling_qwen3_moe.py make layer i sparse when
// i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the others run a dense MLP
// of intermediate_size (Qwen2MoeMLP(config, intermediate_size=config.intermediate_size)).
void read_qwen_experts(JsonFields& f, ModelSpec& m) {
  m.dense_ffn_hidden = m.ffn_hidden;  // intermediate_size, before the experts' width replaces it
  m.experts = f.required_int("num_experts");
  m.experts_per_token = f.required_int("num_experts_per_tok");
  m.ffn_hidden = f.required_int("moe_intermediate_size");
  m.moe_layer_step = f.optional_int("decoder_sparse_step").value_or(1);
  m.mlp_only_layers = read_layer_list(f, "mlp_only_layers", m.layers);
  check_some_moe_layer(f, m, m.mlp_only_layers.empty() ? "decoder_sparse_step" : "mlp_only_layers");
  check_top_k(f, m, "num_experts");
}

// Llama4TextConfig (the text_config of Llama 4 Scout and Maverick; modeling_llama4.py): Llama's
// attention (no biases; use_qk_norm is an L2 norm without weights), MoE layers of
// num_local_experts SwiGLU experts of intermediate_size plus one shared expert of the same width,
// the others dense MLPs of intermediate_size_mlp. MoE layers are moe_layers when given, else every
// interleave_moe_layer_step-th from layer step - 1 (configuration_llama4.py).
void read_llama4(JsonFields& f, ModelSpec& m) {
  m.model_type = "llama";  // Llama's shape keys and attention_bias
  read_llama_family(f, m);
  m.model_type = "llama4_text";
  m.experts = f.optional_int("num_local_experts").value_or(16);
  m.experts_per_token = f.optional_int("num_experts_per_tok").value_or(1);
  m.shared_ffn_hidden = m.ffn_hidden;  // Llama4TextMoe.shared_expert = Llama4TextMLP(config)
  m.dense_ffn_hidden = f.optional_int("intermediate_size_mlp").value_or(16384);
  const int64_t step = f.optional_int("interleave_moe_layer_step").value_or(1);
  const std::vector<int64_t> moe = read_layer_list(f, "moe_layers", m.layers);
  if (f.has("moe_layers")) {  // an explicit list: every other layer is dense
    for (int64_t i = 0; i < m.layers; ++i)  // ascending, as is_dense_layer needs
      if (!std::binary_search(moe.begin(), moe.end(), i)) m.mlp_only_layers.push_back(i);
  } else {
    m.moe_layer_step = step;
  }
  check_some_moe_layer(f, m, f.has("moe_layers") ? "moe_layers" : "interleave_moe_layer_step");
  (void)f.optional_bool("use_qk_norm", true);  // L2 norm without weights: no parameters
  m.attention_chunk = f.optional_int("attention_chunk_size").value_or(8192);
  m.unpriced.push_back("attention_chunk_size " + std::to_string(m.attention_chunk) +
                       " (chunked local attention on the RoPE layers; priced as full causal attention)");
  check_top_k(f, m, "num_local_experts");
}

// Multi-head latent attention (DeepSeek-V2/V3): K and V from a kv_lora_rank latent, Q from a
// q_lora_rank one (null: straight from h). Defaults are DeepseekV2Config's.
void read_mla(JsonFields& f, ModelSpec& m) {
  m.kv_heads = m.heads;  // every head has its own K and V, up-projected from the latent
  if (f.ok() && (m.qkv_bias || m.o_bias)) f.fail("attention_bias", "biases in latent attention are not modelled");
  m.q_lora_rank = f.optional_int("q_lora_rank").value_or(0);
  m.kv_lora_rank = f.optional_int("kv_lora_rank").value_or(512);
  m.qk_rope_dim = f.optional_int("qk_rope_head_dim").value_or(64);
  const int64_t nope = f.optional_int("qk_nope_head_dim").value_or(128);
  for (const auto& [key, value] : {std::pair{"qk_rope_head_dim", m.qk_rope_dim}, {"qk_nope_head_dim", nope}})
    if (f.ok() && value > (int64_t{1} << 24)) f.fail(key, "is " + std::to_string(value) + ", above the supported 2^24");
  if (f.ok()) m.head_dim = nope + m.qk_rope_dim;
  m.v_head_dim = f.optional_int("v_head_dim").value_or(128);
  m.rotary_dims = m.qk_rope_dim;
}

// DeepseekConfig (DeepSeek-MoE, v1: Llama's attention) and DeepseekV2Config / V3Config (latent
// attention): n_routed_experts of moe_intermediate_size with n_shared_experts always on, the first
// first_k_dense_replace layers dense (intermediate_size).
void read_deepseek(JsonFields& f, ModelSpec& m) {
  read_llama_family(f, m);
  m.dense_ffn_hidden = m.ffn_hidden;
  m.experts = f.required_int("n_routed_experts");
  m.experts_per_token = f.required_int("num_experts_per_tok");
  m.ffn_hidden = f.required_int("moe_intermediate_size");
  const int64_t shared = f.optional_int("n_shared_experts", 0).value_or(0);
  if (f.ok() && shared > 1024) f.fail("n_shared_experts", "is " + std::to_string(shared) + ", above the supported 1024");
  if (f.ok()) m.shared_ffn_hidden = shared * m.ffn_hidden;
  m.dense_layers = f.optional_int("first_k_dense_replace", 0).value_or(0);
  // DeepSeek's own moe_layer_freq counts from layer 0 (layer_idx % freq == 0), not as Qwen and
  // Llama 4 do; no published DeepSeek config sets it.
  if (f.optional_int("moe_layer_freq").value_or(1) != 1) f.fail("moe_layer_freq", "only 1 (every layer after the dense ones MoE) is supported");
  check_some_moe_layer(f, m, "first_k_dense_replace");
  if (m.model_type != "deepseek") read_mla(f, m);
  m.router_bias = f.optional_string("topk_method").value_or(m.model_type == "deepseek_v3" ? "noaux_tc" : "greedy") == "noaux_tc";
  m.mtp_layers = f.optional_int("num_nextn_predict_layers", 0).value_or(0);
  check_top_k(f, m, "n_routed_experts");
}

}  // namespace

std::string moe_style_types() { return "mixtral, qwen2_moe, qwen3_moe, deepseek, deepseek_v2, deepseek_v3, llama4_text"; }

bool read_moe_style(JsonFields& f, ModelSpec& m) {
  const std::string type = m.model_type;  // a copy: qwen3_moe reads as qwen3, then is named again
  if (type == "mixtral") {
    read_llama_family(f, m);
    m.experts = f.required_int("num_local_experts");
    m.experts_per_token = f.required_int("num_experts_per_tok");
    check_top_k(f, m, "num_local_experts");
  } else if (type == "qwen2_moe") {
    // Qwen2's attention (biases on Q, K, V), routed experts, and one shared expert of
    // shared_expert_intermediate_size behind a sigmoid gate.
    read_llama_family(f, m);
    m.qkv_bias = true;
    read_qwen_experts(f, m);
    m.shared_ffn_hidden = f.optional_int("shared_expert_intermediate_size", 0).value_or(0);
    m.shared_expert_gate = m.shared_ffn_hidden > 0;
  } else if (type == "qwen3_moe") {  // Qwen3's attention (per-head q/k norms), no shared expert
    m.model_type = "qwen3";
    read_family_type(f, m, "qwen3");
    m.model_type = type;
    read_qwen_experts(f, m);
  } else if (type == "deepseek" || type == "deepseek_v2" || type == "deepseek_v3") {
    read_deepseek(f, m);
  } else if (type == "llama4_text") {
    read_llama4(f, m);
  } else if (type == "minicpm" && f.has("num_experts")) {
    // MiniCPM-MoE (modeling_minicpm.py's MiniCPMMoE): num_experts MiniCPM MLPs of
    // intermediate_size behind a bias-free h x num_experts gate, top num_experts_per_tok.
    read_family_type(f, m, "minicpm");
    m.experts = f.required_int("num_experts");
    m.experts_per_token = f.required_int("num_experts_per_tok");
    check_top_k(f, m, "num_experts");
  } else {
    return false;
  }
  // Biases inside experts are not modelled (no MoE family has them).
  if (f.ok() && m.has_mlp_bias()) f.fail("mlp_bias", "biases in the experts are not modelled");
  return true;
}

}  // namespace parallax::hf
