// Readers of configs that name their shape with Llama's keys (hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size,
// max_position_embeddings, head_dim): Llama and the models built as Llama with other defaults or
// biases (Mistral, Qwen2, InternLM, Baichuan, Orion), a table of relatives with their own details
// (Qwen3, Gemma, Phi-3, ...), and three with keys of their own (Qwen v1, ChatGLM, Nemotron).
// Defaults are those of each type's Hugging Face config class (or its remote code's).
#include <algorithm>
#include <string>

#include "models/hf_readers.h"

namespace parallax::hf {

void read_shape(JsonFields& f, ModelSpec& m) {
  m.hidden = f.required_int("hidden_size");
  m.ffn_hidden = f.required_int("intermediate_size");
  m.layers = f.required_int("num_hidden_layers");
  m.heads = f.required_int("num_attention_heads");
  // Hugging Face: num_key_value_heads = null means multi-head attention (k = a).
  m.kv_heads = f.optional_int("num_key_value_heads").value_or(m.heads);
  m.vocab = f.required_int("vocab_size");
  // Baichuan-13B names its context model_max_length only.
  m.max_positions = f.required_int(f.has("max_position_embeddings") || !f.has("model_max_length") ? "max_position_embeddings" : "model_max_length");
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

namespace {

// The dropout probabilities these configs name (Phi-3 and StarCoder2 add the GPT-style ones).
constexpr std::initializer_list<const char*> kDropoutKeys = {"attention_dropout", "hidden_dropout", "resid_pdrop",
                                                             "embd_pdrop", "residual_dropout", "embedding_dropout"};

// rope_theta, or (transformers 5's layout, Ministral 3) rope_parameters.rope_theta.
double read_rope_theta(JsonFields& f) {
  auto params = f.object().find("rope_parameters");
  if (f.has("rope_parameters") && params->is_object()) {
    JsonFields p(*params, f.where() + ": rope_parameters");
    const double theta = p.optional_number("rope_theta").value_or(10000.0);
    if (!p.ok()) f.fail("rope_parameters", p.error());
    return theta;
  }
  return f.optional_number("rope_theta").value_or(10000.0);
}

// A bias key the type's modeling code does not build from is refused when true, rather than priced
// as a bias that transformers would not create.
void refuse_true(JsonFields& f, const char* key, const std::string& type) {
  if (f.optional_bool(key, false)) f.fail(key, "is true, but transformers' " + type + " builds no such bias");
}

}  // namespace

// LlamaConfig and the types built as Llama (RMSNorm, SwiGLU, rotary positions) with their biases:
// Llama's attention_bias on Q, K, V and O, mlp_bias on gate, up and down; Qwen2's fixed Q, K, V
// biases; InternLM's bias (default true) on Q, K, V and O; none in Mistral, Mixtral and Baichuan.
void read_llama_family(JsonFields& f, ModelSpec& m) {
  const std::string& type = m.model_type;
  m.norm = Norm::kRmsNorm;
  m.mlp = Mlp::kSwiGlu;
  m.positions = Positions::kRotary;
  read_shape(f, m);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", false);
  if (type == "llama" || type == "orion" || type == "deepseek" || type == "deepseek_v2" || type == "deepseek_v3") {
    m.qkv_bias = m.o_bias = f.optional_bool("attention_bias", false);
    m.mlp_bias = type == "llama" ? f.optional_bool("mlp_bias", false) : (refuse_true(f, "mlp_bias", type), false);
  } else if (type == "internlm") {
    m.qkv_bias = m.o_bias = f.optional_bool("bias", true);
  } else {
    m.qkv_bias = type == "qwen2";
    refuse_true(f, "attention_bias", type);
    refuse_true(f, "mlp_bias", type);
  }
  m.dropout = any_dropout(f, kDropoutKeys);
  m.rope_theta = read_rope_theta(f);
  m.norm_eps = f.optional_number("rms_norm_eps").value_or(1e-6);  // LlamaConfig's default
  // Qwen2 keeps a sliding_window size it applies only with use_sliding_window.
  const bool window = f.has("sliding_window");
  if (window && (type != "qwen2" || f.optional_bool("use_sliding_window", false)))
    m.unpriced.push_back("sliding_window (priced as full attention)");
  if (type == "orion") {  // OrionDecoderLayer: nn.LayerNorm, with a bias, for every norm
    m.norm = Norm::kLayerNorm;
    m.norm_bias = true;
  }
  if (f.ok() && m.heads % m.kv_heads != 0) f.fail("num_key_value_heads", "must divide num_attention_heads");
  read_head_dim(f, m);
}

namespace {

// Decoder-only relatives of Llama and GPT-NeoX: the same shape keys, each type's defaults and the
// details that change parameters, FLOPs or memory.
enum class Biases {
  kNone,         // Phi-3: none, whatever the config says
  kAttention,    // attention_bias: Q, K, V and O (Qwen3, OLMo, Gemma, MiniCPM, Cohere)
  kAttnAndMlp,   // Granite: attention_bias as above, mlp_bias on the MLP
  kQkv,          // StableLM: use_qkv_bias on Q, K, V only
  kInternLm2,    // bias: wqkv and wo; the MLP has none
  kAll,          // StarCoder2: use_bias on every linear
  kNeoX,         // GPT-NeoX: attention_bias (default true) on QKV and dense; the MLP always
};
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
  Biases biases;
};
constexpr Family kFamilies[] = {
    {"qwen3", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 1, false, Biases::kAttention},
    {"olmo2", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 2, false, Biases::kAttention},
    {"olmo", Norm::kLayerNorm, false, false, 2, true, "silu", false, 1.0, 0, false, Biases::kAttention},
    {"gemma", Norm::kRmsNorm, false, true, 2, true, "gelu_pytorch_tanh", true, 1.0, 0, false, Biases::kAttention},
    {"gemma2", Norm::kRmsNorm, false, true, 4, true, "gelu_pytorch_tanh", true, 1.0, 0, false, Biases::kAttention},
    {"gemma3_text", Norm::kRmsNorm, false, true, 4, true, "gelu_pytorch_tanh", true, 1.0, 1, false, Biases::kAttention},
    {"phi3", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 0, false, Biases::kNone},
    {"internlm2", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 0, false, Biases::kInternLm2},
    {"granite", Norm::kRmsNorm, false, true, 2, true, "silu", false, 1.0, 0, false, Biases::kAttnAndMlp},
    {"minicpm", Norm::kRmsNorm, false, true, 2, true, "silu", true, 1.0, 0, false, Biases::kAttention},
    {"cohere", Norm::kLayerNorm, false, true, 1, true, "silu", true, 1.0, 0, true, Biases::kAttention},
    {"stablelm", Norm::kLayerNorm, true, true, 2, true, "silu", false, 0.25, 0, false, Biases::kQkv},
    {"gpt_neox", Norm::kLayerNorm, true, true, 2, false, "gelu", false, 0.25, 0, true, Biases::kNeoX},
    {"starcoder2", Norm::kLayerNorm, true, true, 2, false, "gelu_pytorch_tanh", true, 1.0, 0, false, Biases::kAll},
};

void read_family_biases(JsonFields& f, ModelSpec& m, Biases rule) {
  const std::string& type = m.model_type;
  switch (rule) {
    case Biases::kNone:
      for (const char* key : {"attention_bias", "mlp_bias", "lm_head_bias"}) refuse_true(f, key, type);
      break;
    case Biases::kAttention:
    case Biases::kAttnAndMlp:
      m.qkv_bias = m.o_bias = f.optional_bool("attention_bias", false);
      if (rule == Biases::kAttnAndMlp) m.mlp_bias = f.optional_bool("mlp_bias", false);
      else refuse_true(f, "mlp_bias", type);
      break;
    case Biases::kQkv:
      m.qkv_bias = f.optional_bool("use_qkv_bias", false);
      break;
    case Biases::kInternLm2:
      m.qkv_bias = m.o_bias = f.optional_bool("bias", true);
      break;
    case Biases::kAll:
      m.linear_bias = f.optional_bool("use_bias", true);
      break;
    case Biases::kNeoX:
      m.qkv_bias = m.o_bias = f.optional_bool("attention_bias", true);
      m.mlp_bias = true;
      break;
  }
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
  m.rope_theta = read_rope_theta(f);
  m.norm_eps = f.optional_number(f.has("rms_norm_eps") ? "rms_norm_eps" : f.has("layer_norm_eps") ? "layer_norm_eps" : "norm_epsilon")
                   .value_or(1e-5);
  m.hidden_act = f.optional_string(f.has("hidden_activation") ? "hidden_activation" : "hidden_act").value_or(fam.act);
  read_family_biases(f, m, fam.biases);
  m.dropout = any_dropout(f, kDropoutKeys);
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

// Qwen (v1, QWenLMHeadModel): c_attn (Q, K, V) always with a bias, c_proj and the MLP with one
// unless no_bias; the MLP's w1 and w2 are each intermediate_size / 2 wide (a SwiGLU of f / 2);
// kv_channels is the head dimension.
void read_qwen_v1(JsonFields& f, ModelSpec& m) {
  m.hidden = f.required_int("hidden_size");
  m.ffn_hidden = f.required_int("intermediate_size") / 2;
  m.layers = f.required_int("num_hidden_layers");
  m.heads = m.kv_heads = f.required_int("num_attention_heads");
  m.vocab = f.required_int("vocab_size");
  m.max_positions = f.required_int(f.has("max_position_embeddings") ? "max_position_embeddings" : "seq_length");
  m.head_dim = f.optional_int("kv_channels").value_or(m.hidden / m.heads);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", false);
  m.qkv_bias = true;
  m.o_bias = m.mlp_bias = !f.optional_bool("no_bias", true);
  m.norm_eps = f.optional_number("layer_norm_epsilon").value_or(1e-6);
  m.rope_theta = f.optional_number("rotary_emb_base").value_or(read_rope_theta(f));
  m.dropout = any_dropout(f, {"attn_dropout_prob", "emb_dropout_prob"});
  const double rotary = f.optional_number("rotary_pct").value_or(1.0);
  if (f.ok() && (rotary > 1.0 || static_cast<int64_t>(static_cast<double>(m.head_dim) * rotary) < 2))
    f.fail("rotary_pct", "must leave at least 2 and at most head_dim rotary dimensions");
  m.rotary_dims = static_cast<int64_t>(static_cast<double>(m.head_dim) * rotary) / 2 * 2;
  if (f.ok() && m.q_dim() != m.hidden) f.fail("kv_channels", "times num_attention_heads must equal hidden_size (c_attn is h -> 3h)");
}

// ChatGLM 2/3 (ChatGLMModel): its own key names; RMSNorm (rmsnorm), grouped queries
// (multi_query_group_num), QKV biases (add_qkv_bias), no other biases unless add_bias_linear, a
// SwiGLU of ffn_hidden_size, rotary on half of each head (the original GLM rope).
void read_chatglm(JsonFields& f, ModelSpec& m) {
  m.hidden = f.required_int("hidden_size");
  m.ffn_hidden = f.required_int("ffn_hidden_size");
  m.layers = f.required_int("num_layers");
  m.heads = f.required_int("num_attention_heads");
  m.kv_heads = f.optional_bool("multi_query_attention", false) ? f.required_int("multi_query_group_num") : m.heads;
  m.vocab = f.required_int("padded_vocab_size");
  m.max_positions = f.required_int("seq_length");
  m.head_dim = f.optional_int("kv_channels").value_or(m.hidden / m.heads);
  m.rotary_dims = m.head_dim / 2 / 2 * 2;
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", false);
  m.linear_bias = f.optional_bool("add_bias_linear", false);
  m.qkv_bias = f.optional_bool("add_qkv_bias", false);
  m.norm = f.optional_bool("rmsnorm", true) ? Norm::kRmsNorm : Norm::kLayerNorm;
  m.norm_bias = m.norm == Norm::kLayerNorm;
  m.norm_eps = f.optional_number("layernorm_epsilon").value_or(1e-5);
  m.dropout = any_dropout(f, kDropoutKeys);
  // Without post_layer_norm there is no final norm, and a prefix encoder (P-tuning) adds weights.
  if (!f.optional_bool("post_layer_norm", true)) f.fail("post_layer_norm", "false (no final norm) is not modelled");
  if (f.optional_int("pre_seq_len").has_value()) f.fail("pre_seq_len", "a P-tuning prefix encoder is not modelled");
  if (f.ok() && m.heads % m.kv_heads != 0) f.fail("multi_query_group_num", "must divide num_attention_heads");
}

}  // namespace

std::string llama_style_types() {
  std::string known = "llama, mistral, ministral, ministral3, qwen2, internlm, baichuan, orion, qwen, chatglm, nemotron";
  for (const Family& fam : kFamilies) known += std::string(", ") + fam.type;
  return known;
}

bool read_family_type(JsonFields& f, ModelSpec& m, const std::string& type) {
  for (const Family& fam : kFamilies) {
    if (type == fam.type) {
      read_family(f, m, fam);
      return true;
    }
  }
  return false;
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
  m.rope_theta = read_rope_theta(f);
  m.norm_eps = f.optional_number("norm_eps").value_or(1e-5);
  m.dropout = any_dropout(f, kDropoutKeys);
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

bool read_llama_style(JsonFields& f, ModelSpec& m) {
  const std::string type = m.model_type;  // a copy: phi3_v reads as phi3, then is named again
  if (type == "llama" || type == "mistral" || type == "ministral" || type == "ministral3" || type == "qwen2" ||
      type == "internlm" || type == "baichuan" || type == "orion") {
    read_llama_family(f, m);
  } else if (type == "qwen") {
    read_qwen_v1(f, m);
  } else if (type == "chatglm") {
    read_chatglm(f, m);
  } else if (type == "nemotron") {
    read_nemotron(f, m);
  } else if (type == "phi3_v") {  // Phi-3-vision: Phi-3's language model at the top level
    m.model_type = "phi3";
    read_family_type(f, m, "phi3");
    m.model_type = type;
  } else {
    return read_family_type(f, m, type);
  }
  return true;
}

}  // namespace parallax::hf
