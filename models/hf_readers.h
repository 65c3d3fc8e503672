// The readers of Hugging Face config.json objects behind model_from_hf_config(), one per family of
// key names: read_gpt.cc (GPT-2's n_embd / n_layer keys: GPT-2, GPT-BigCode, GPT-J, phi-msft),
// read_llama.cc (Llama's hidden_size / num_hidden_layers keys and its relatives), read_moe.cc (the
// mixture-of-experts keys). Internal to models/.
#pragma once

#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "models/json_fields.h"
#include "models/model_spec.h"

namespace parallax::hf {

// True when any of `keys` is present with a dropout probability above 0.
bool any_dropout(JsonFields& f, std::initializer_list<const char*> keys);

// GPT-2-style keys (read_gpt.cc). Each returns false when `m.model_type` is not one of its types.
bool read_gpt_style(JsonFields& f, ModelSpec& m);

// Llama-style keys (read_llama.cc): Llama, Mistral, Qwen2 and the table of relatives (Qwen3,
// Gemma, Phi-3, ...), Qwen v1, InternLM, Baichuan, Orion, ChatGLM, Nemotron.
bool read_llama_style(JsonFields& f, ModelSpec& m);
// The shared shape keys and head_dim of Llama-style configs, and its whole reader (LlamaConfig).
void read_shape(JsonFields& f, ModelSpec& m);
void read_head_dim(JsonFields& f, ModelSpec& m);
void read_llama_family(JsonFields& f, ModelSpec& m);
// Reads `type` as one of the table's relatives; false when it is none of them.
bool read_family_type(JsonFields& f, ModelSpec& m, const std::string& type);
// The types read_llama_style accepts, for the "supported:" list.
std::string llama_style_types();

// Mixture-of-experts keys (read_moe.cc): Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek (v1, V2, V3),
// MiniCPM-MoE (minicpm with num_experts).
bool read_moe_style(JsonFields& f, ModelSpec& m);
// The types read_moe_style accepts.
std::string moe_style_types();

}  // namespace parallax::hf
