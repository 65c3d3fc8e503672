#include "models/model_spec.h"

#include <gtest/gtest.h>

#include "models/layer_cost.h"

namespace parallax {
namespace {

ModelSpec load(const std::string& name) {
  Result<ModelSpec> m = load_model(name);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error());
  return m.ok() ? *m : ModelSpec{};
}

// Parameter counts as published by the model owners (Hugging Face model cards / safetensors
// metadata); every bundled model must reproduce its count exactly.
TEST(ModelSpec, BundledModelsHaveTheirPublishedParameterCounts) {
  const std::pair<const char*, int64_t> expected[] = {
      {"gpt2", 124'439'808},           {"llama2-7b", 6'738'415'616},     {"13b", 13'015'864'320},
      {"llama2-13b", 13'015'864'320},  {"llama2-70b", 68'976'648'192},   {"llama3-8b", 8'030'261'248},
      {"llama3-70b", 70'553'706'496},  {"llama3.1-405b", 405'853'388'800}, {"mistral-7b", 7'241'732'096},
      {"mixtral-8x7b", 46'702'792'704}, {"qwen2-7b", 7'615'616'512}, {"llama3.1-8b", 8'030'261'248},
      {"deepseek-v2-lite", 15'706'484'224}, {"qwen1.5-moe-a2.7b", 14'315'784'192}};
  for (const auto& [name, params] : expected) EXPECT_EQ(total_params(load(name)), params) << name;
}

// Megatron-LM (Narayanan et al. 2021): P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h))
//   = 12 L h^2 + 13 L h + (V + s) h, which leaves out the final LayerNorm (2h).
// GPT-3 175B, L 96, h 12288, V 51200, s 2048:
//   12*96*12288^2 = 173,946,175,488; 13*96*12288 = 15,335,424; (51200+2048)*12288 = 654,311,424
//   P = 174,615,822,336; with the final LayerNorm 174,615,846,912.
TEST(ModelSpec, Gpt3ParameterCountEqualsMegatronFormula) {
  const ModelSpec m = load("gpt3-175b");
  const int64_t L = m.layers, h = m.hidden, V = m.vocab, s = m.max_positions;
  const int64_t megatron = 12 * L * h * h + 13 * L * h + (V + s) * h;
  EXPECT_EQ(megatron, 174'615'822'336);
  EXPECT_EQ(total_params(m) - edge_params(m).final_norm, megatron);
  EXPECT_EQ(total_params(m), 174'615'846'912);
  // The same identity for every GPT shape of Korthikanti et al.
  for (const char* name : {"gpt-22b", "gpt-530b", "gpt-1t", "gpt2"}) {
    const ModelSpec g = load(name);
    const double P = 12.0 * g.layers * g.hidden * g.hidden *
                     (1 + 13.0 / (12.0 * g.hidden) + double(g.vocab + g.max_positions) / (12.0 * g.layers * g.hidden));
    EXPECT_NEAR(double(total_params(g) - edge_params(g).final_norm), P, 1e-9 * P) << name;
  }
}

// The GPU runtime's MFU model, by the same formula: L 24, h 2048, V 50257, s 2048:
//   12*24*2048^2 = 1,207,959,552; 13*24*2048 = 638,976; (50257+2048)*2048 = 107,120,640;
//   final LayerNorm 2*2048 = 4,096: P = 1,315,723,264.
TEST(ModelSpec, Gpt13bHasTheParametersItsNameSays) {
  EXPECT_EQ(total_params(load("gpt-1.3b")), 1'315'723'264);
}

// Nemotron-4 15B (Parmar et al. 2024: 12.5B non-embedding and 3.2B embedding parameters): L 32,
// h 6144, 48 heads of 128, 8 KV heads (kv_dim 1024), f 24576, V 256000, untied.
//   attention 6144 * (2*6144 + 2*1024) = 88,080,384; squared-ReLU MLP 2 * 6144 * 24576 =
//   301,989,888; two LayerNorms 4 * 6144 = 24,576: 390,094,848 per layer, x 32 = 12,483,035,136;
//   embeddings 2 * 256000 * 6144 = 3,145,728,000; final LayerNorm 12,288: 15,628,775,424.
TEST(ModelSpec, Nemotron15bHasItsPublishedParameters) {
  nlohmann::json c = {{"model_type", "nemotron"}, {"hidden_size", 6144}, {"intermediate_size", 24576},
                      {"num_hidden_layers", 32}, {"num_attention_heads", 48}, {"num_key_value_heads", 8},
                      {"vocab_size", 256000}, {"max_position_embeddings", 4096}};
  Result<ModelSpec> m = model_from_hf_config(c, "nemotron.json");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(total_params(*m), 15'628'775'424);
  EXPECT_EQ(m->mlp, Mlp::kSquaredRelu);
  EXPECT_EQ(m->norm, Norm::kLayerNorm);
  EXPECT_EQ(m->rotary_dims, 64);  // partial_rotary_factor defaults to 0.5
  c["hidden_act"] = "gelu";
  EXPECT_EQ(model_from_hf_config(c, "n.json").error(),
            "n.json: key 'hidden_act': 'gelu' is not supported for nemotron (only relu2)");
}

// Today's decoder-only checkpoints, each from its published config.json, with the parameter count
// its model card or paper states. Per layer: attention h (2q + 2kv), MLP 3hf gated or 2hf, the
// norms (RMSNorm h, LayerNorm with bias 2h, OLMo 1's none), q/k norms, biases; plus V h once or
// twice (tied or not) and the final norm. E.g. Qwen3-8B: 36 x (41,943,040 + 150,994,944 + 8,192
// + 256) + 2 x 151,936 x 4,096 + 4,096 = 8,190,735,360 ("8.2B"; 6.95B without embeddings).
TEST(ModelSpec, TodaysArchitecturesHaveTheirPublishedParameters) {
  struct Case {
    const char* name;
    const char* config;
    int64_t params;
    double published;  // as the source rounds it
  };
  const Case cases[] = {
      {"Qwen3-8B", R"({"model_type":"qwen3","hidden_size":4096,"intermediate_size":12288,"num_hidden_layers":36,
        "num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,
        "max_position_embeddings":40960,"tie_word_embeddings":false})", 8'190'735'360, 8.2e9},
      {"Gemma-7B", R"({"model_type":"gemma","hidden_size":3072,"intermediate_size":24576,"num_hidden_layers":28,
        "num_attention_heads":16,"num_key_value_heads":16,"head_dim":256,"vocab_size":256000,
        "max_position_embeddings":8192})", 8'537'680'896, 8.54e9},
      {"Gemma-2-9B", R"({"model_type":"gemma2","hidden_size":3584,"intermediate_size":14336,"num_hidden_layers":42,
        "num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"vocab_size":256000,
        "max_position_embeddings":8192,"sliding_window":4096,"attn_logit_softcapping":50.0,
        "final_logit_softcapping":30.0})", 9'241'705'984, 9.24e9},
      {"Gemma-3-1B", R"({"model_type":"gemma3_text","hidden_size":1152,"intermediate_size":6912,"num_hidden_layers":26,
        "num_attention_heads":4,"num_key_value_heads":1,"head_dim":256,"vocab_size":262144,
        "max_position_embeddings":32768,"sliding_window":512})", 999'885'952, 1.0e9},
      {"Phi-3-mini", R"({"model_type":"phi3","hidden_size":3072,"intermediate_size":8192,"num_hidden_layers":32,
        "num_attention_heads":32,"num_key_value_heads":32,"vocab_size":32064,"max_position_embeddings":4096,
        "tie_word_embeddings":false})", 3'821'079'552, 3.82e9},
      {"OLMo-2-7B", R"({"model_type":"olmo2","hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,
        "num_attention_heads":32,"num_key_value_heads":32,"vocab_size":100352,"max_position_embeddings":4096,
        "tie_word_embeddings":false})", 7'298'617'344, 7.30e9},
      {"OLMo-7B", R"({"model_type":"olmo","hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,
        "num_attention_heads":32,"vocab_size":50304,"max_position_embeddings":2048,"clip_qkv":null})", 6'888'095'744, 6.89e9},
      {"InternLM2-7B", R"({"model_type":"internlm2","hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
        "num_attention_heads":32,"num_key_value_heads":8,"vocab_size":92544,"max_position_embeddings":32768,
        "bias":false})", 7'737'708'544, 7.74e9},
      {"Granite-3.0-8B", R"({"model_type":"granite","hidden_size":4096,"intermediate_size":12800,"num_hidden_layers":40,
        "num_attention_heads":32,"num_key_value_heads":8,"vocab_size":49155,"max_position_embeddings":4096,
        "tie_word_embeddings":true,"embedding_multiplier":12.0})", 8'170'848'256, 8.17e9},
      {"MiniCPM-2B", R"({"model_type":"minicpm","hidden_size":2304,"intermediate_size":5760,"num_hidden_layers":40,
        "num_attention_heads":36,"num_key_value_heads":36,"vocab_size":122753,"max_position_embeddings":4096,
        "scale_emb":12})", 2'724'880'896, 2.72e9},
      {"Command-R", R"({"model_type":"cohere","hidden_size":8192,"intermediate_size":22528,"num_hidden_layers":40,
        "num_attention_heads":64,"num_key_value_heads":64,"vocab_size":256000,"max_position_embeddings":8192,
        "logit_scale":0.0625})", 34'980'831'232, 35.0e9},
      {"StableLM-2-1.6B", R"({"model_type":"stablelm","hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":24,
        "num_attention_heads":32,"num_key_value_heads":32,"vocab_size":100352,"max_position_embeddings":4096,
        "use_qkv_bias":true,"partial_rotary_factor":0.25})", 1'644'515'328, 1.64e9},
      {"Pythia-1.4B", R"({"model_type":"gpt_neox","hidden_size":2048,"intermediate_size":8192,"num_hidden_layers":24,
        "num_attention_heads":16,"vocab_size":50304,"max_position_embeddings":2048,"rotary_pct":0.25,
        "use_parallel_residual":true,"hidden_act":"gelu"})", 1'414'647'808, 1.41e9},
      {"StarCoder2-7B", R"({"model_type":"starcoder2","hidden_size":4608,"intermediate_size":18432,"num_hidden_layers":32,
        "num_attention_heads":36,"num_key_value_heads":4,"vocab_size":49152,"max_position_embeddings":16384,
        "use_bias":true,"sliding_window":4096})", 7'173'923'840, 7.17e9},
  };
  for (const Case& c : cases) {
    Result<ModelSpec> m = model_from_hf_config(nlohmann::json::parse(c.config), c.name);
    ASSERT_TRUE(m.ok()) << c.name << ": " << m.error();
    EXPECT_EQ(total_params(*m), c.params) << c.name;
    EXPECT_NEAR(double(total_params(*m)), c.published, 0.005 * c.published) << c.name;
  }
  const ModelSpec gemma2 = model_from_hf_config(nlohmann::json::parse(cases[2].config), "g").value();
  EXPECT_EQ(gemma2.unpriced.size(), 3u);  // both soft-cappings and the sliding window, named
  EXPECT_EQ(model_from_hf_config(nlohmann::json::parse(cases[12].config), "p").value().rotary_dims, 32);  // 0.25 x 128
}

// MoE families by hand, each equal to its published count.
// DeepSeek-V2-Lite (h 2048, 27 layers, 16 heads, V 102400, untied):
//   MLA: q 2048 x 16 x 192 = 6,291,456; kv down 2048 x (512 + 64) = 1,179,648; kv norm 512;
//   kv up 512 x 16 x (128 + 128) = 2,097,152; O 2048 x 2048 = 4,194,304 -> 13,763,072; norms 4,096.
//   Layer 0, dense: + 3 x 2048 x 10944 = 67,239,936 -> 81,007,104.
//   MoE layers: + 64 x 3 x 2048 x 1408 = 553,648,128 experts, 3 x 2048 x 2816 = 17,301,504 shared,
//   64 x 2048 = 131,072 router -> 584,847,872; x 26 = 15,206,044,672.
//   Embedding and head 2 x 209,715,200, final norm 2,048: 15,706,484,224.
// Qwen1.5-MoE-A2.7B (h 2048, 24 layers, 60 experts of 1408, shared 5632, V 151936):
//   4 x 2048^2 + 3 x 2048 (QKV bias) + 4,096 norms + 60 x 3 x 2048 x 1408 + 3 x 2048 x 5632 +
//   2048 (shared gate) + 60 x 2048 (router) = 570,560,512; x 24 + 2 x 311,164,928 + 2048 =
//   14,315,784,192.
// DeepSeek-V3 (671B, without its multi-token-prediction module) and Qwen3-235B-A22B, from their
// Hugging Face configs.
TEST(ModelSpec, MixtureOfExpertsFamilies) {
  const char* v3 = R"({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3, "num_attention_heads": 128,
    "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": false})";
  EXPECT_EQ(total_params(model_from_hf_config(nlohmann::json::parse(v3), "v3").value()), 671'026'419'200);
  const char* qwen3 = R"({"model_type": "qwen3_moe", "hidden_size": 4096, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4,
    "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": false})";
  EXPECT_EQ(total_params(model_from_hf_config(nlohmann::json::parse(qwen3), "q3").value()), 235'093'634'560);
  const ModelSpec lite = load("deepseek-v2-lite");
  EXPECT_TRUE(lite.is_mla());
  EXPECT_EQ(lite.head_dim, 192);
  EXPECT_EQ(lite.v_head_dim, 128);
  EXPECT_EQ(lite.shared_ffn_hidden, 2816);
  // Sizes whose products would overflow are refused before they are multiplied.
  nlohmann::json big = nlohmann::json::parse(v3);
  big["n_shared_experts"] = int64_t{1} << 62;
  EXPECT_FALSE(model_from_hf_config(big, "big").ok());
  big = nlohmann::json::parse(v3);
  big["qk_nope_head_dim"] = int64_t{1} << 62;
  EXPECT_FALSE(model_from_hf_config(big, "big").ok());
  // Legality of the config: dense layers that leave no MoE one are named (tests/program/moe_layers_test.cc
  // prices dense layers among MoE ones).
  EXPECT_EQ(model_from_hf_config(nlohmann::json::parse(R"({"model_type": "qwen2_moe", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
    "max_position_embeddings": 64, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "mlp_only_layers": [0, 1]})"), "x").error(), "x: key 'mlp_only_layers': leaves no MoE layer");
}

TEST(ModelSpec, ReadsArchitectureDetails) {
  const ModelSpec mix = load("mixtral-8x7b");
  EXPECT_EQ(mix.experts, 8);
  EXPECT_EQ(mix.experts_per_token, 2);
  EXPECT_EQ(mix.kv_heads, 8);
  EXPECT_EQ(mix.head_dim, 128);
  EXPECT_FALSE(mix.dropout);
  const ModelSpec gpt = load("gpt2");
  EXPECT_EQ(gpt.ffn_hidden, 3072);  // n_inner null = 4 * n_embd
  EXPECT_TRUE(gpt.tied_embeddings);
  EXPECT_TRUE(gpt.dropout);
  EXPECT_EQ(gpt.norm, Norm::kLayerNorm);
  EXPECT_TRUE(load("qwen2-7b").qkv_bias);
  EXPECT_EQ(load("13b").name, "13b");
}

TEST(ModelSpec, FindsModelsByNameOrPath) {
  EXPECT_TRUE(load_model("13b").ok());
  EXPECT_TRUE(load_model("13b.json").ok());
  EXPECT_TRUE(load_model(std::string(PARALLAX_SOURCE_DIR) + "/models/13b.json").ok());
  Result<ModelSpec> missing = load_model("no-such-model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().rfind("unknown model 'no-such-model' (not a file; bundled: 13b, ", 0), 0u) << missing.error();
  EXPECT_NE(load_model("llama3-8").error().find("; closest: llama3-8b)"), std::string::npos);
  EXPECT_NE(load_model("/no/such/model.json").error().find("/no/such/model.json: cannot open file"), std::string::npos);
}

TEST(ModelSpec, ErrorsNameTheKey) {
  auto error = [](const char* text) {
    Result<ModelSpec> m = model_from_hf_config(nlohmann::json::parse(text), "x.json");
    return m.ok() ? std::string("ok") : m.error();
  };
  EXPECT_EQ(error(R"({"model_type":"llama","intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":1,
                     "vocab_size":1,"max_position_embeddings":1})"),
            "x.json: key 'hidden_size': missing required key");
  EXPECT_EQ(error(R"({"model_type":"gpt2","n_embd":"768","n_layer":1,"n_head":1,"vocab_size":1,"n_positions":1})"),
            "x.json: key 'n_embd': expected an integer, got \"768\"");
  EXPECT_EQ(error(R"({"model_type":"gpt2","n_embd":-8,"n_layer":1,"n_head":1,"vocab_size":1,"n_positions":1})"),
            "x.json: key 'n_embd': must be >= 1, got -8");
  EXPECT_EQ(error(R"({"model_type":"bert"})"),
            "x.json: key 'model_type': 'bert' is an encoder (or encoder-decoder) model; Parallax plans decoder-only transformers");
  EXPECT_EQ(error(R"({"model_type":"falcon"})"),
            "x.json: key 'model_type': unsupported 'falcon' (supported: gpt2, gpt_bigcode, gptj, phi-msft, mixtral, qwen2_moe, qwen3_moe, deepseek, deepseek_v2, deepseek_v3, llama4_text, llama, mistral, ministral, ministral3, qwen2, internlm, baichuan, orion, qwen, chatglm, nemotron, qwen3, olmo2, olmo, gemma, gemma2, gemma3_text, phi3, internlm2, granite, minicpm, cohere, stablelm, gpt_neox, starcoder2; multimodal configs through their text_config)");
  EXPECT_EQ(error(R"({"hidden_size":8})"), "x.json: key 'model_type': missing (and no known entry in 'architectures')");
  EXPECT_EQ(error(R"({"model_type":"llama","hidden_size":64,"intermediate_size":1,"num_hidden_layers":1,
                     "num_attention_heads":8,"num_key_value_heads":3,"vocab_size":1,"max_position_embeddings":1})"),
            "x.json: key 'num_key_value_heads': must divide num_attention_heads");
  EXPECT_EQ(error(R"({"model_type":"llava","text_config":{"model_type":3}})"),
            "x.json: text_config: key 'model_type': expected a string, got 3");
}

TEST(ModelSpec, ArchitecturesKeyIdentifiesOlderExports) {
  Result<ModelSpec> m = model_from_hf_config(
      nlohmann::json::parse(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":32})"),
      "x.json");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->model_type, "llama");
  EXPECT_EQ(m->kv_heads, 4);  // absent num_key_value_heads means MHA in Hugging Face
}

}  // namespace
}  // namespace parallax
