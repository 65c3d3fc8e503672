#include "models/model_spec.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "models/json_fields.h"

namespace parallax {

namespace {

bool any_dropout(JsonFields& f, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (f.optional_number(key, /*allow_zero=*/true).value_or(0.0) > 0.0) return true;
  }
  return false;
}

// GPT2Config: learned positions, LayerNorm, GELU, biases everywhere, tied embeddings.
void read_gpt2(JsonFields& f, ModelSpec& m) {
  m.norm = Norm::kLayerNorm;
  m.norm_bias = true;
  m.hidden_act = "gelu_new";
  m.mlp = Mlp::kGelu;
  m.positions = Positions::kLearned;
  m.hidden = f.required_int("n_embd");
  m.layers = f.required_int("n_layer");
  m.heads = f.required_int("n_head");
  m.kv_heads = m.heads;
  m.vocab = f.required_int("vocab_size");
  m.max_positions = f.required_int("n_positions");
  // GPT2Config documents n_inner = null as 4 * n_embd.
  m.ffn_hidden = f.optional_int("n_inner").value_or(4 * m.hidden);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", true);
  m.linear_bias = true;
  m.norm_eps = f.optional_number("layer_norm_epsilon").value_or(1e-5);  // GPT2Config's default
  // GPT2Config's defaults for the three dropouts are 0.1.
  m.dropout = !f.has("resid_pdrop") && !f.has("attn_pdrop") && !f.has("embd_pdrop")
                  ? true
                  : any_dropout(f, {"resid_pdrop", "attn_pdrop", "embd_pdrop"});
  if (f.ok() && m.hidden % m.heads != 0) f.fail("n_embd", "must be a multiple of n_head");
  if (f.ok()) m.head_dim = m.hidden / m.heads;
}

// The keys every Llama-style config (and GPT-NeoX's) names its shape with. Hugging Face:
// num_key_value_heads = null means multi-head attention (k = a).
void read_shape(JsonFields& f, ModelSpec& m) {
  m.hidden = f.required_int("hidden_size");
  m.ffn_hidden = f.required_int("intermediate_size");
  m.layers = f.required_int("num_hidden_layers");
  m.heads = f.required_int("num_attention_heads");
  m.kv_heads = f.optional_int("num_key_value_heads").value_or(m.heads);
  m.vocab = f.required_int("vocab_size");
  m.max_positions = f.required_int("max_position_embeddings");
}

// head_dim as given, else hidden_size / num_attention_heads (both Llama's and Nemotron's rule).
void read_head_dim(JsonFields& f, ModelSpec& m) {
  if (f.has("head_dim")) {
    m.head_dim = f.required_int("head_dim");
  } else if (f.ok()) {
    if (m.hidden % m.heads != 0) f.fail("hidden_size", "must be a multiple of num_attention_heads");
    m.head_dim = m.hidden / std::max<int64_t>(m.heads, 1);
  }
}

// LlamaConfig and its relatives (Mistral, Mixtral, Qwen2): RMSNorm, SwiGLU, rotary positions.
void read_llama_family(JsonFields& f, ModelSpec& m) {
  m.norm = Norm::kRmsNorm;
  m.mlp = Mlp::kSwiGlu;
  m.positions = Positions::kRotary;
  read_shape(f, m);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", false);
  m.qkv_bias = m.model_type == "qwen2" || f.optional_bool("attention_bias", false);
  m.dropout = any_dropout(f, {"attention_dropout", "hidden_dropout"});
  m.rope_theta = f.optional_number("rope_theta").value_or(10000.0);
  m.norm_eps = f.optional_number("rms_norm_eps").value_or(1e-6);  // LlamaConfig's default
  if (m.model_type == "mixtral") {
    m.experts = f.required_int("num_local_experts");
    m.experts_per_token = f.required_int("num_experts_per_tok");
    if (f.ok() && m.experts_per_token > m.experts)
      f.fail("num_experts_per_tok", "exceeds num_local_experts");
  }
  if (f.ok() && m.heads % m.kv_heads != 0)
    f.fail("num_key_value_heads", "must divide num_attention_heads");
  read_head_dim(f, m);
}

// The routed experts of Qwen2MoeConfig and Qwen3MoeConfig: num_experts of moe_intermediate_size,
// top num_experts_per_tok. Only every layer sparse is modelled (decoder_sparse_step 1, no
// mlp_only_layers).
void read_qwen_experts(JsonFields& f, const nlohmann::json& config, ModelSpec& m) {
  m.experts = f.required_int("num_experts");
  m.experts_per_token = f.required_int("num_experts_per_tok");
  m.ffn_hidden = f.required_int("moe_intermediate_size");
  if (f.optional_int("decoder_sparse_step").value_or(1) != 1) f.fail("decoder_sparse_step", "only 1 (every layer MoE) is supported");
  auto only = config.find("mlp_only_layers");
  if (f.ok() && only != config.end() && only->is_array() && !only->empty())
    f.fail("mlp_only_layers", "dense layers among MoE ones are not supported");
  if (f.ok() && m.experts_per_token > m.experts) f.fail("num_experts_per_tok", "exceeds num_experts");
}

// Qwen2MoeConfig (Qwen1.5/Qwen2-MoE): Qwen2's attention (biases on Q, K, V), routed experts, and
// one shared expert of shared_expert_intermediate_size behind a sigmoid gate.
void read_qwen2_moe(JsonFields& f, const nlohmann::json& config, ModelSpec& m) {
  read_llama_family(f, m);
  m.qkv_bias = true;
  read_qwen_experts(f, config, m);
  m.shared_ffn_hidden = f.optional_int("shared_expert_intermediate_size", 0).value_or(0);
  m.shared_expert_gate = m.shared_ffn_hidden > 0;
}

// DeepseekV2Config / DeepseekV3Config: multi-head latent attention, n_routed_experts of
// moe_intermediate_size with n_shared_experts always on, the first first_k_dense_replace layers
// dense (intermediate_size). Defaults are DeepseekV2Config's.
void read_deepseek(JsonFields& f, ModelSpec& m) {
  read_llama_family(f, m);
  m.kv_heads = m.heads;  // MLA: every head has its own K and V, up-projected from the latent
  m.dense_ffn_hidden = m.ffn_hidden;
  m.experts = f.required_int("n_routed_experts");
  m.experts_per_token = f.required_int("num_experts_per_tok");
  m.ffn_hidden = f.required_int("moe_intermediate_size");
  const int64_t shared = f.optional_int("n_shared_experts", 0).value_or(0);
  if (f.ok() && shared > 1024) f.fail("n_shared_experts", "is " + std::to_string(shared) + ", above the supported 1024");
  if (f.ok()) m.shared_ffn_hidden = shared * m.ffn_hidden;
  m.dense_layers = f.optional_int("first_k_dense_replace", 0).value_or(0);
  if (f.optional_int("moe_layer_freq").value_or(1) != 1) f.fail("moe_layer_freq", "only 1 (every layer after the dense ones MoE) is supported");
  if (f.ok() && m.dense_layers >= m.layers) f.fail("first_k_dense_replace", "leaves no MoE layer");
  m.q_lora_rank = f.optional_int("q_lora_rank").value_or(0);  // null: Q straight from h (V2-Lite)
  m.kv_lora_rank = f.optional_int("kv_lora_rank").value_or(512);
  m.qk_rope_dim = f.optional_int("qk_rope_head_dim").value_or(64);
  const int64_t nope = f.optional_int("qk_nope_head_dim").value_or(128);
  for (const auto& [key, value] : {std::pair{"qk_rope_head_dim", m.qk_rope_dim}, {"qk_nope_head_dim", nope}})
    if (f.ok() && value > (int64_t{1} << 24)) f.fail(key, "is " + std::to_string(value) + ", above the supported 2^24");
  if (f.ok()) m.head_dim = nope + m.qk_rope_dim;
  m.v_head_dim = f.optional_int("v_head_dim").value_or(128);
  m.rotary_dims = m.qk_rope_dim;
  m.router_bias = f.optional_string("topk_method").value_or(m.model_type == "deepseek_v3" ? "noaux_tc" : "greedy") == "noaux_tc";
  if (f.ok() && m.experts_per_token > m.experts) f.fail("num_experts_per_tok", "exceeds n_routed_experts");
}

// NemotronConfig (Nemotron-4): LayerNorm1p (LayerNorm whose weight is stored as w - 1), a
// squared-ReLU MLP without a gate, rotary positions on partial_rotary_factor of each head, GQA, no
// linear biases by default. Defaults are NemotronConfig's.
void read_nemotron(JsonFields& f, ModelSpec& m) {
  m.norm = Norm::kLayerNorm;
  m.norm_bias = true;
  m.hidden_act = "relu2";
  m.mlp = Mlp::kSquaredRelu;
  m.positions = Positions::kRotary;
  read_shape(f, m);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", false);
  m.rope_theta = f.optional_number("rope_theta").value_or(10000.0);
  m.norm_eps = f.optional_number("norm_eps").value_or(1e-5);
  m.dropout = any_dropout(f, {"attention_dropout"});
  const std::string act = f.optional_string("hidden_act").value_or("relu2");
  if (act != "relu2") f.fail("hidden_act", "'" + act + "' is not supported for nemotron (only relu2)");
  const bool attention_bias = f.optional_bool("attention_bias", false), mlp_bias = f.optional_bool("mlp_bias", false);
  if (attention_bias != mlp_bias) f.fail("mlp_bias", "must equal attention_bias (biases on some linears only are not modelled)");
  m.linear_bias = attention_bias;
  if (f.ok() && m.heads % m.kv_heads != 0) f.fail("num_key_value_heads", "must divide num_attention_heads");
  read_head_dim(f, m);
  const double fraction = f.optional_number("partial_rotary_factor").value_or(0.5);
  if (f.ok() && (fraction > 1.0 || static_cast<int64_t>(m.head_dim * fraction) < 2))
    f.fail("partial_rotary_factor", "must leave at least 2 and at most head_dim rotary dimensions");
  m.rotary_dims = static_cast<int64_t>(static_cast<double>(m.head_dim) * fraction) / 2 * 2;
}

// Decoder-only relatives of Llama and GPT-NeoX: the same keys (hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size,
// max_position_embeddings, head_dim), each type's defaults and the details that change
// parameters, FLOPs or memory. Defaults are those of each type's Hugging Face config class.
struct Family {
  const char* type;
  Norm norm;
  bool norm_bias, norm_affine;
  int norms_per_layer;
  bool gated;              // gate + up (SwiGLU / GeGLU) rather than one FC1
  const char* act;         // hidden_act default
  bool tied;               // tie_word_embeddings default
  double rotary;           // partial rotary default (1 = all of each head)
  int qk_norm;             // 0 none, 1 per head (2 head_dim), 2 over the projections (q_dim + kv_dim)
  bool parallel;           // attention and MLP in parallel
  bool bias;               // every linear has a bias by default
};
constexpr Family kFamilies[] = {
    {"qwen3", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 1, false, false},
    {"olmo2", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 2, false, false},
    {"olmo", Norm::kLayerNorm, false, false, 2, true, "silu", false, 1.0, 0, false, false},
    {"gemma", Norm::kRmsNorm, false, true, 2, true, "gelu_pytorch_tanh", true, 1.0, 0, false, false},
    {"gemma2", Norm::kRmsNorm, false, true, 4, true, "gelu_pytorch_tanh", true, 1.0, 0, false, false},
    {"gemma3_text", Norm::kRmsNorm, false, true, 4, true, "gelu_pytorch_tanh", true, 1.0, 1, false, false},
    {"phi3", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 0, false, false},
    {"internlm2", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 0, false, false},
    {"granite", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 0, false, false},
    {"minicpm", Norm::kRmsNorm, false, true, 2, true, "silu", true, 1.0, 0, false, false},
    {"cohere", Norm::kLayerNorm, false, true, 1, true, "silu", true, 1.0, 0, true, false},
    {"stablelm", Norm::kLayerNorm, true, true, 2, true, "silu", false, 0.25, 0, false, false},
    {"gpt_neox", Norm::kLayerNorm, true, true, 2, false, "gelu", false, 0.25, 0, true, true},
    {"starcoder2", Norm::kLayerNorm, true, true, 2, false, "gelu_pytorch_tanh", true, 1.0, 0, false, true},
};

const Family* find_family(const std::string& type) {
  for (const Family& f : kFamilies)
    if (type == f.type) return &f;
  return nullptr;
}

void read_family(JsonFields& f, ModelSpec& m, const Family& fam) {
  m.norm = fam.norm;
  m.norm_bias = fam.norm_bias;
  m.norm_affine = fam.norm_affine;
  m.norms_per_layer = fam.norms_per_layer;
  m.mlp = fam.gated ? Mlp::kSwiGlu : Mlp::kGelu;  // a gated MLP has SwiGLU's shape whatever its activation
  m.parallel_block = f.optional_bool("use_parallel_residual", fam.parallel);
  m.positions = Positions::kRotary;
  read_shape(f, m);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", fam.tied);
  m.rope_theta = f.optional_number("rope_theta").value_or(10000.0);
  m.norm_eps = f.optional_number(f.has("rms_norm_eps") ? "rms_norm_eps" : f.has("layer_norm_eps") ? "layer_norm_eps" : "norm_epsilon")
                   .value_or(1e-5);
  m.hidden_act = f.optional_string(f.has("hidden_activation") ? "hidden_activation" : "hidden_act").value_or(fam.act);
  const bool bias = f.optional_bool("use_bias", f.optional_bool("bias", fam.bias));
  m.linear_bias = f.optional_bool("attention_bias", bias) && bias;
  m.qkv_bias = f.optional_bool("use_qkv_bias", false) || (f.optional_bool("attention_bias", false) && !m.linear_bias);
  m.dropout = any_dropout(f, {"attention_dropout", "hidden_dropout"});
  if (f.ok() && m.heads % m.kv_heads != 0) f.fail("num_key_value_heads", "must divide num_attention_heads");
  read_head_dim(f, m);
  const double rotary = f.optional_number(f.has("rotary_pct") ? "rotary_pct" : "partial_rotary_factor").value_or(fam.rotary);
  if (f.ok() && (rotary > 1.0 || static_cast<int64_t>(static_cast<double>(m.head_dim) * rotary) < 2))
    f.fail("partial_rotary_factor", "must leave at least 2 and at most head_dim rotary dimensions");
  m.rotary_dims = static_cast<int64_t>(static_cast<double>(m.head_dim) * rotary) / 2 * 2;
  const int qk = fam.qk_norm ? fam.qk_norm : (f.optional_bool("use_qk_norm", false) || f.optional_bool("qk_layernorm", false) ? 1 : 0);
  m.qk_norm_params = qk == 1 ? 2 * m.head_dim * (m.norm_bias ? 2 : 1) : qk == 2 ? m.q_dim() + m.kv_dim() : 0;
  // Named, not priced: each is small beside the GEMMs or changes no FLOP count Parallax uses.
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "logit_scale", "embedding_multiplier",
                          "scale_emb", "clip_qkv"})
    if (f.has(key)) m.unpriced.push_back(key);
  if (m.parallel_block) m.unpriced.push_back("parallel attention and MLP (priced as sequential, two TP reductions)");
  if (f.has("sliding_window")) m.unpriced.push_back("sliding_window (priced as full attention)");
}

std::string infer_model_type(JsonFields& f, const nlohmann::json& config) {
  if (auto type = f.optional_string("model_type")) return *type;
  // Older exports only name the class in "architectures".
  auto it = config.find("architectures");
  if (it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    std::string arch = (*it)[0].get<std::string>();
    for (const char* type : {"GPT2", "Llama", "Mistral", "Mixtral", "Qwen2", "Nemotron"}) {
      if (arch.rfind(type, 0) == 0) {
        std::string lower = type;
        for (char& c : lower) c = static_cast<char>(std::tolower(c));
        return lower;
      }
    }
  }
  f.fail("model_type", "missing (and no known entry in 'architectures')");
  return {};
}

// Bounds that keep every integer product of the cost model far from int64 overflow: each size at
// most 2^24 and the parameter count (estimated in floating point) at most 10^15.
void check_sizes(JsonFields& f, const ModelSpec& m) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  const std::pair<const char*, int64_t> sizes[] = {
      {"hidden size", m.hidden}, {"FFN size", m.ffn_hidden}, {"layers", m.layers},   {"heads", m.heads},
      {"head_dim", m.head_dim},  {"vocab_size", m.vocab},    {"max positions", m.max_positions},
      {"experts", m.experts}, {"FFN size", m.dense_ffn_hidden}, {"FFN size", m.shared_ffn_hidden},
      {"kv_lora_rank", m.kv_lora_rank}, {"q_lora_rank", m.q_lora_rank}, {"v_head_dim", m.v_head_dim}};
  for (const auto& [what, value] : sizes) {
    if (value > kMaxDim) return f.fail(what, "is " + std::to_string(value) + ", above the supported 2^24");
  }
  const double h = double(m.hidden), q = double(m.heads) * double(m.head_dim);
  double layer = h * (2.0 * (q + double(m.kv_heads) * double(m.head_dim))) + 3.0 * double(m.experts) * h * double(m.ffn_hidden) +
                 3.0 * h * double(m.shared_ffn_hidden + m.dense_ffn_hidden);
  // MLA: the up-projections from the latents and the down-projections into them.
  layer += double(m.kv_lora_rank) * (q + double(m.heads) * double(m.v_head_dim)) + double(m.q_lora_rank) * q +
           h * double(m.kv_lora_rank + m.q_lora_rank + m.qk_rope_dim);
  const double params = double(m.layers) * layer + 2.0 * double(m.vocab) * h + double(m.max_positions) * h;
  if (params > 1e15) f.fail("model", "has about " + std::to_string(params) + " parameters, above the supported 10^15");
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const nlohmann::json& config, const std::string& where) {
  JsonFields f(config, where);
  ModelSpec m;
  m.model_type = infer_model_type(f, config);
  if (!f.ok()) return Error{f.error()};
  if (m.model_type == "gpt2") {
    read_gpt2(f, m);
  } else if (m.model_type == "llama" || m.model_type == "mistral" || m.model_type == "mixtral" ||
             m.model_type == "qwen2") {
    read_llama_family(f, m);
  } else if (m.model_type == "nemotron") {
    read_nemotron(f, m);
  } else if (m.model_type == "qwen2_moe") {
    read_qwen2_moe(f, config, m);
  } else if (m.model_type == "qwen3_moe") {  // Qwen3's attention (per-head q/k norms), no shared expert
    read_family(f, m, *find_family("qwen3"));
    read_qwen_experts(f, config, m);
  } else if (m.model_type == "deepseek_v2" || m.model_type == "deepseek_v3") {
    read_deepseek(f, m);
  } else if (const Family* family = find_family(m.model_type)) {
    read_family(f, m, *family);
  } else {
    std::string known = "gpt2, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, nemotron";
    for (const Family& fam : kFamilies) known += std::string(", ") + fam.type;
    f.fail("model_type", "unsupported '" + m.model_type + "' (supported: " + known + ")");
  }
  if (f.ok() && m.positions == Positions::kRotary && m.rotary_dims == 0) m.rotary_dims = m.head_dim;
  if (m.v_head_dim == 0) m.v_head_dim = m.head_dim;
  if (f.ok()) check_sizes(f, m);
  if (!f.ok()) return Error{f.error()};
  m.name = m.model_type;
  return m;
}

ModelSpec dense_layer_model(const ModelSpec& m) {
  if (m.dense_layers == 0) return m;
  ModelSpec d = m;
  d.experts = d.experts_per_token = 1;
  d.ffn_hidden = m.dense_ffn_hidden;
  d.shared_ffn_hidden = 0;
  d.shared_expert_gate = false;
  d.dense_layers = 0;
  return d;
}

std::string data_dir() {
  if (const char* dir = std::getenv("PARALLAX_DATA_DIR"); dir && *dir) return dir;
  return PARALLAX_SOURCE_DIR;
}

std::string resolve_data_file(const std::string& name_or_path, const std::string& subdir) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(name_or_path)) return name_or_path;
  const fs::path dir = fs::path(data_dir()) / subdir;
  const fs::path name = fs::path(name_or_path).filename();
  for (const fs::path& candidate : {dir / name, dir / (name.string() + ".json")}) {
    if (fs::is_regular_file(candidate)) return candidate.string();
  }
  return name_or_path;  // let the reader report "cannot open"
}

namespace {
// Edits (insert, delete, substitute) between two names: picks the closest bundled one.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string unknown_data_file(const std::string& name_or_path, const std::string& subdir, const std::string& kind) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || fs::exists(resolve_data_file(name_or_path, subdir), ec)) return "";
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(data_dir()) / subdir, ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  const std::string want = fs::path(name_or_path).stem().string();
  std::string list, closest;
  for (const std::string& n : names) {
    list += (list.empty() ? "" : ", ") + n;
    if (closest.empty() || edit_distance(want, n) < edit_distance(want, closest)) closest = n;
  }
  std::string msg = "unknown " + kind + " '" + name_or_path + "' (not a file; bundled: " + list;
  if (!closest.empty()) msg += "; closest: " + closest;
  return msg + ")";
}

Result<ModelSpec> load_model(const std::string& name_or_path) {
  if (std::string unknown = unknown_data_file(name_or_path, "models", "model"); !unknown.empty()) return Error{unknown};
  const std::string path = resolve_data_file(name_or_path, "models");
  Result<nlohmann::json> config = read_json_file(path);
  if (!config.ok()) return Error{config.error()};
  Result<ModelSpec> model = model_from_hf_config(*config, path);
  if (!model.ok()) return model;
  model->name = std::filesystem::path(path).stem().string();
  return model;
}

}  // namespace parallax
