// Readers of configs that name their shape with GPT-2's keys (n_embd, n_layer, n_head, n_inner,
// n_positions): GPT-2, GPT-BigCode (SantaCoder, StarCoder 1), GPT-J and Microsoft's original phi-1.5
// / phi-2 code (model_type phi-msft). All use LayerNorm with a bias and GELU MLPs without a gate.
#include <string>

#include "models/hf_readers.h"

namespace parallax::hf {

namespace {

// The keys the four share; defaults are each config class's.
void read_gpt_shape(JsonFields& f, ModelSpec& m, bool tied_default) {
  m.norm = Norm::kLayerNorm;
  m.norm_bias = true;
  m.mlp = Mlp::kGelu;
  m.hidden = f.required_int("n_embd");
  m.layers = f.required_int("n_layer");
  m.heads = f.required_int("n_head");
  m.kv_heads = m.heads;
  m.vocab = f.required_int("vocab_size");
  m.max_positions = f.required_int("n_positions");
  // n_inner = null is documented as 4 * n_embd in all four config classes.
  m.ffn_hidden = f.optional_int("n_inner").value_or(4 * m.hidden);
  m.tied_embeddings = f.optional_bool("tie_word_embeddings", tied_default);
  m.norm_eps = f.optional_number("layer_norm_epsilon").value_or(1e-5);
  if (f.ok() && m.hidden % m.heads != 0) f.fail("n_embd", "must be a multiple of n_head");
  if (f.ok()) m.head_dim = m.hidden / m.heads;
}

// Dropouts: GPT2Config and GPTBigCodeConfig default all three to 0.1, GPT-J and phi to 0.
bool gpt_dropout(JsonFields& f, double absent) {
  if (!f.has("resid_pdrop") && !f.has("attn_pdrop") && !f.has("embd_pdrop")) return absent > 0;
  return any_dropout(f, {"resid_pdrop", "attn_pdrop", "embd_pdrop"});
}

// Rotary on the first rotary_dim dimensions of each head (null: all of them).
void read_rotary_dim(JsonFields& f, ModelSpec& m, int64_t absent) {
  m.positions = Positions::kRotary;
  const int64_t dims = f.optional_int("rotary_dim").value_or(absent);
  if (f.ok() && (dims > m.head_dim || dims % 2 != 0))
    f.fail("rotary_dim", "must be even and at most the head dimension " + std::to_string(m.head_dim));
  m.rotary_dims = dims;
}

// One LayerNorm feeds attention and MLP side by side (GPTJBlock, phi's ParallelBlock).
void parallel_block(ModelSpec& m) {
  m.norms_per_layer = 1;
  m.parallel_block = true;
  m.unpriced.push_back("parallel attention and MLP (priced as sequential, two TP reductions)");
}

}  // namespace

bool read_gpt_style(JsonFields& f, ModelSpec& m) {
  const std::string& type = m.model_type;
  if (type == "gpt2" || type == "gpt_bigcode") {
    // Learned positions, biases on every linear, tied embeddings.
    read_gpt_shape(f, m, /*tied_default=*/true);
    m.positions = Positions::kLearned;
    m.linear_bias = true;
    m.dropout = gpt_dropout(f, 0.1);
    m.hidden_act = f.optional_string("activation_function").value_or(type == "gpt2" ? "gelu_new" : "gelu_pytorch_tanh");
    // GPTBigCode's multi-query attention: one K and one V head shared by all heads (the default).
    if (type == "gpt_bigcode" && f.optional_bool("multi_query", true)) m.kv_heads = 1;
  } else if (type == "gptj") {
    // GPTJBlock: q, k, v and out_proj without biases, fc_in / fc_out with, lm_head with a bias.
    read_gpt_shape(f, m, /*tied_default=*/false);
    read_rotary_dim(f, m, m.head_dim);
    m.mlp_bias = m.lm_head_bias = true;
    m.dropout = gpt_dropout(f, 0.0);
    m.hidden_act = f.optional_string("activation_function").value_or("gelu_new");
    parallel_block(m);
  } else if (type == "phi-msft") {
    // phi-1.5 / phi-2 (modeling_phi.py before transformers' PhiForCausalLM): MHA (n_head_kv null),
    // Wqkv, out_proj, fc1, fc2 all with biases, and a CausalLMHead of LayerNorm + biased linear.
    read_gpt_shape(f, m, /*tied_default=*/false);
    if (f.has("n_head_kv")) m.kv_heads = f.required_int("n_head_kv");
    if (f.ok() && m.heads % m.kv_heads != 0) f.fail("n_head_kv", "must divide n_head");
    read_rotary_dim(f, m, 32);
    m.linear_bias = m.lm_head_bias = true;
    m.dropout = gpt_dropout(f, 0.0);
    m.hidden_act = f.optional_string("activation_function").value_or("gelu_new");
    parallel_block(m);
  } else {
    return false;
  }
  return true;
}

}  // namespace parallax::hf
