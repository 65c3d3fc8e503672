#include "models/model_spec.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "models/hf_readers.h"
#include "models/json_fields.h"

namespace parallax {

namespace hf {
bool any_dropout(JsonFields& f, std::initializer_list<const char*> keys) {
  bool any = false;  // every key is read (validated, and known to the unread-key check)
  for (const char* key : keys) any = f.optional_number(key, /*allow_zero=*/true).value_or(0.0) > 0.0 || any;
  return any;
}
}  // namespace hf

namespace {

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

// Keys that change parameters, FLOPs or memory in some family. A reader that does not read one
// for its type would price the model as if it were absent (minicpm's num_experts once made an
// 8-expert 13.9B model a dense 2.7B one), so one that is set and unread is refused by name.
constexpr std::initializer_list<const char*> kShapeKeys = {
    "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
    "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace",
    "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers", "interleave_moe_layer_step", "moe_layers",
    "intermediate_size_mlp", "attention_chunk_size", "q_lora_rank", "kv_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers",
    "attention_bias", "mlp_bias", "lm_head_bias", "bias", "use_bias", "use_qkv_bias", "no_bias",
    "add_qkv_bias", "add_bias_linear", "qk_layernorm", "use_qk_norm", "head_dim", "kv_channels",
    "num_key_value_heads", "multi_query", "n_head_kv", "multi_query_group_num", "intermediate_size",
    "ffn_hidden_size", "n_inner", "partial_rotary_factor", "rotary_pct", "rotary_dim", "sliding_window",
    "use_parallel_residual", "parallel_attn", "new_decoder_architecture", "alibi", "pre_seq_len",
    "text_config", "vision_config", "img_processor", "attention_dropout", "hidden_dropout", "resid_pdrop",
    "attn_pdrop", "embd_pdrop", "residual_dropout", "embedding_dropout"};

// Types that are not decoder-only transformers, refused with what they are.
std::string not_a_decoder(const std::string& type) {
  if (type == "bert" || type == "roberta" || type == "t5" || type == "nomic_bert") return "an encoder (or encoder-decoder) model";
  if (type.rfind("rwkv", 0) == 0 || type == "mamba" || type == "mamba2") return "a recurrent model, not attention layers";
  return "";
}

// Dispatches on model_type; the readers record the first problem in `f`.
void read_by_type(JsonFields& f, ModelSpec& m) {
  if (hf::read_moe_style(f, m) || hf::read_gpt_style(f, m) || hf::read_llama_style(f, m)) return;
  if (std::string what = not_a_decoder(m.model_type); !what.empty())
    return f.fail("model_type", "'" + m.model_type + "' is " + what + "; Parallax plans decoder-only transformers");
  f.fail("model_type", "unsupported '" + m.model_type + "' (supported: gpt2, gpt_bigcode, gptj, phi-msft, " +
                           hf::moe_style_types() + ", " + hf::llama_style_types() +
                           "; multimodal configs through their text_config)");
}

// LlamaConfig's defaults, which a multimodal config's text_config may lean on (LLaVA-1.5 names
// only what differs from Llama-2-7B).
nlohmann::json with_llama_defaults(const nlohmann::json& text) {
  nlohmann::json c = {{"hidden_size", 4096}, {"intermediate_size", 11008}, {"num_hidden_layers", 32},
                      {"num_attention_heads", 32}, {"vocab_size", 32000}, {"max_position_embeddings", 2048}};
  for (const auto& [key, value] : text.items()) c[key] = value;
  return c;
}

// A vision-language config (LLaVA, Mistral 3 / Ministral 3, Gemma 3): its language model is
// text_config, whose model_type defaults to the outer type's (LLaVA: llama). The vision encoder
// and projector are named as not priced.
Result<ModelSpec> read_multimodal(JsonFields& f, const std::string& where) {
  const nlohmann::json& text = f.required_object("text_config");
  JsonFields text_fields(text, where + ": text_config");
  std::string type = text_fields.optional_string("model_type").value_or("");
  if (!text_fields.ok()) return Error{text_fields.error()};
  const std::string outer = f.optional_string("model_type").value_or("");
  if (type.empty() && outer.rfind("llava", 0) == 0) type = "llama";
  if (type.empty() && (outer == "mistral3" || outer == "ministral3")) type = "mistral";
  if (f.ok() && type.empty()) f.fail("text_config", "has no model_type (the language model's type)");
  if (!f.ok()) return Error{f.error()};
  nlohmann::json inner = type == "llama" ? with_llama_defaults(text) : text;
  inner["model_type"] = type;
  Result<ModelSpec> m = model_from_hf_config(inner, where + ": text_config");
  if (!m.ok()) return m;
  if (f.has("vision_config")) m->unpriced.push_back("vision_config (" + outer + "'s vision encoder and projector; its language model alone is priced)");
  if (std::string key = f.first_unread_set(kShapeKeys); !key.empty())
    return Error{where + ": key '" + key + "': changes parameters, FLOPs or memory and is not read for '" + outer + "'"};
  return m;
}

// ModelSpec::Recipe: the router, rotary scaling and MTP depth, for the exporters. Absent keys take
// the Hugging Face config classes' defaults (MixtralConfig, Qwen2MoeConfig and Qwen3MoeConfig:
// router_aux_loss_coef 0.001, Qwen norm_topk_prob false; DeepseekV2Config: aux_loss_alpha 0.001,
// seq_aux, softmax, norm_topk_prob false; DeepseekV3Config: sigmoid, norm_topk_prob,
// routed_scaling_factor 2.5, n_group 8, topk_group 4).
void read_training_recipe(JsonFields& f, ModelSpec& m) {
  ModelSpec::Recipe& r = m.recipe;
  const std::string& type = m.model_type;
  const bool v3 = type == "deepseek_v3", deepseek = type.rfind("deepseek", 0) == 0, qwen = type.rfind("qwen", 0) == 0;
  // Llama 4 (Llama4Router): a sigmoid of the top-k logits, not renormalised; aux loss 0.001.
  const bool llama4 = type == "llama4_text";
  if (m.is_moe()) {
    r.router_score = f.optional_string("scoring_func").value_or(v3 || llama4 ? "sigmoid" : "softmax");
    if (f.ok() && r.router_score != "softmax" && r.router_score != "sigmoid")
      f.fail("scoring_func", "'" + r.router_score + "' is not softmax or sigmoid");
    r.router_norm_topk = f.optional_bool("norm_topk_prob", v3 || !(deepseek || qwen || llama4));
    r.router_scaling = f.optional_number("routed_scaling_factor").value_or(v3 ? 2.5 : 1.0);
    const std::string method = f.optional_string("topk_method").value_or(v3 ? "noaux_tc" : "greedy");
    if (method == "noaux_tc" || method == "group_limited_greedy") {
      r.router_groups = f.optional_int("n_group").value_or(v3 ? 8 : 1);
      r.router_group_topk = f.optional_int("topk_group").value_or(v3 ? 4 : 1);
    }
    const bool deepseek_aux = deepseek && !v3;
    r.aux_loss_coef = f.optional_number(f.has("aux_loss_alpha") ? "aux_loss_alpha" : "router_aux_loss_coef", true)
                          .value_or(deepseek_aux || type == "mixtral" || qwen || llama4 ? 0.001 : 0.0);
    r.seq_aux_loss = deepseek && f.optional_bool("seq_aux", true);
  }
  const auto scaling = f.object().find("rope_scaling");
  if (f.ok() && scaling != f.object().end() && scaling->is_object()) {
    JsonFields s(*scaling, f.where() + ": rope_scaling");
    r.rope_scaling = s.optional_string(s.has("rope_type") ? "rope_type" : "type").value_or("");
    r.rope_factor = s.optional_number("factor").value_or(1.0);
    r.rope_low_freq = s.optional_number("low_freq_factor").value_or(1.0);
    r.rope_high_freq = s.optional_number("high_freq_factor").value_or(4.0);
    r.rope_original_positions = s.optional_int("original_max_position_embeddings").value_or(0);
    r.rope_beta_fast = s.optional_number("beta_fast").value_or(32.0);
    r.rope_beta_slow = s.optional_number("beta_slow").value_or(1.0);
    r.rope_mscale = s.optional_number("mscale").value_or(1.0);
    r.rope_mscale_all_dim = s.optional_number("mscale_all_dim", true).value_or(0.0);
    if (!s.ok()) f.fail("rope_scaling", s.error());
  }
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const nlohmann::json& config, const std::string& where) {
  JsonFields f(config, where);
  if (f.has("text_config")) return read_multimodal(f, where);
  ModelSpec m;
  m.model_type = infer_model_type(f, config);
  if (!f.ok()) return Error{f.error()};
  read_by_type(f, m);
  if (f.ok()) read_training_recipe(f, m);
  // Phi-3-vision keeps Phi-3's language model at the top level beside its image encoder.
  for (const char* key : {"img_processor", "embd_layer"})
    if (m.model_type == "phi3_v" && f.has(key)) m.unpriced.push_back(std::string(key) + " (the vision encoder; the language model alone is priced)");
  if (f.ok() && m.positions == Positions::kRotary && m.rotary_dims == 0) m.rotary_dims = m.head_dim;
  if (m.v_head_dim == 0) m.v_head_dim = m.head_dim;
  if (f.ok()) check_sizes(f, m);
  if (f.ok()) {
    if (std::string key = f.first_unread_set(kShapeKeys); !key.empty())
      f.fail(key, "changes parameters, FLOPs or memory and is not read for model_type '" + m.model_type + "'");
  }
  if (!f.ok()) return Error{f.error()};
  m.name = m.model_type;
  return m;
}

bool ModelSpec::is_dense_layer(int64_t i) const {
  if (i < dense_layers) return true;
  if (moe_layer_step > 1 && (i + 1) % moe_layer_step != 0) return true;
  return std::binary_search(mlp_only_layers.begin(), mlp_only_layers.end(), i);  // sorted by the readers
}

int64_t ModelSpec::dense_layers_in(int64_t first, int64_t count) const {
  if (moe_layer_step <= 1 && mlp_only_layers.empty()) {  // leading dense layers only: no walk
    const int64_t end = first + count < dense_layers ? first + count : dense_layers;
    return end > first ? end - first : 0;
  }
  int64_t n = 0;
  for (int64_t i = first; i < first + count; ++i) n += is_dense_layer(i) ? 1 : 0;
  return n;
}

ModelSpec dense_layer_model(const ModelSpec& m) {
  if (!m.has_dense_layers()) return m;
  ModelSpec d = m;
  d.experts = d.experts_per_token = 1;
  d.ffn_hidden = m.dense_ffn_hidden;
  d.shared_ffn_hidden = 0;
  d.shared_expert_gate = false;
  d.dense_layers = 0;
  d.moe_layer_step = 1;
  d.mlp_only_layers.clear();
  return d;
}

std::string data_dir() {
  if (const char* dir = std::getenv("PARALLAX_DATA_DIR"); dir && *dir) return dir;
  return PARALLAX_SOURCE_DIR;
}

std::string resolve_data_file(const std::string& name_or_path, const std::string& subdir) {
  namespace fs = std::filesystem;
  std::error_code ec;  // a name the OS refuses (too long, say) is simply not found
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  const fs::path dir = fs::path(data_dir()) / subdir;
  const fs::path name = fs::path(name_or_path).filename();
  for (const fs::path& candidate : {dir / name, dir / (name.string() + ".json")}) {
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
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
