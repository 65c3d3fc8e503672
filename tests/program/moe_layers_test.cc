// MoE every k-th layer (ModelSpec::moe_layer_step, mlp_only_layers): Llama 4 Maverick's
// interleave_moe_layer_step and Qwen2-MoE's decoder_sparse_step / mlp_only_layers. Parameter
// counts are exact, each pipeline chunk counts the dense layers of the pattern it holds, the CPU
// runtime refuses the pattern in one line, and the Megatron export states it (--moe-layer-freq).
#include <gtest/gtest.h>

#include "models/layer_cost.h"
#include "planner/export.h"
#include "program/framework.h"
#include "program/model_state.h"
#include "program/runtime_support.h"

namespace parallax {
namespace {

// Llama-4-Maverick-17B-128E's text_config (meta-llama/Llama-4-Maverick-17B-128E config.json,
// wrapped as Llama4ForConditionalGeneration's; its vision_config is named as not priced).
ModelSpec maverick() {
  const nlohmann::json c = nlohmann::json::parse(R"({"model_type": "llama4", "vision_config": {"hidden_size": 1408},
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 202048, "max_position_embeddings": 1048576, "num_local_experts": 128,
    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "rope_theta": 500000.0, "rms_norm_eps": 1e-05,
    "attention_chunk_size": 8192, "use_qk_norm": false, "tie_word_embeddings": false, "attention_bias": false,
    "router_aux_loss_coef": 0.001}})");
  return model_from_hf_config(c, "maverick").value();
}

// A small Qwen2-MoE with decoder_sparse_step 2: layers 1 and 3 MoE, 0 and 2 dense.
nlohmann::json small_qwen_json() {
  return nlohmann::json::parse(R"({"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "max_position_embeddings": 64, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 48, "decoder_sparse_step": 2, "tie_word_embeddings": false})");
}

// Maverick: h 5120, 48 layers, 40 heads of 128 (q 5120), 8 KV heads (kv 1024), untied vocab 202,048.
//   attention  h (q + k + v + o) = 5120 (5120 + 1024 + 1024 + 5120)      =     62,914,560
//   norms      2 h                                                       =         10,240
//   dense MLP  3 h 16384 (intermediate_size_mlp)                         =    251,658,240
//   MoE MLP    128 x 3 h 8192 (experts) + 3 h 8192 (shared) + h 128 (router)
//              = 16,106,127,360 + 125,829,120 + 655,360                  = 16,232,611,840
//   24 dense layers x 314,583,040 = 7,549,992,960; 24 MoE x 16,295,536,640 = 391,092,879,360
//   embedding + head 2 x 202,048 x 5120 = 2,068,971,520; final norm 5,120
//   total 400,711,848,960 (published: ~400B total, 17B active).
TEST(MoeLayers, Llama4MaverickParametersExact) {
  const ModelSpec m = maverick();
  EXPECT_EQ(m.moe_layer_step, 2);
  EXPECT_EQ(m.dense_layer_count(), 24);
  EXPECT_TRUE(m.is_dense_layer(0));
  EXPECT_FALSE(m.is_dense_layer(1));  // configuration_llama4.py: moe_layers = range(1, 48, 2)
  EXPECT_EQ(m.shared_ffn_hidden, 8192);
  EXPECT_EQ(dense_layer_model(m).ffn_hidden, 16384);
  EXPECT_EQ(total_params(m), int64_t{400711848960});
  // Active per token: 48 x (62,914,560 + 10,240) + 24 x 251,658,240 + 24 x (2 x 125,829,120 +
  // 655,360) + 2,068,971,520 + 5,120 = 17,184,691,200 (published 17B active); checked here by hand
  // from the layer parameters, the expert ones counted once (top-1).
  const LayerParams moe = layer_params(m), dense = layer_params(dense_layer_model(m));
  const int64_t active = 24 * dense.total() + 24 * (moe.total() - moe.expert + moe.expert / 128) + 2 * 202048 * 5120 + 5120;
  EXPECT_EQ(active, int64_t{17184691200});
  EXPECT_EQ(m.recipe.router_score, "sigmoid");
  EXPECT_FALSE(m.recipe.router_norm_topk);
  // The same layers named by an explicit moe_layers list (1, 3, ..., 47) give the same count.
  nlohmann::json c = nlohmann::json::parse(R"({"model_type": "llama4_text", "hidden_size": 5120,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048, "max_position_embeddings": 1048576,
    "num_local_experts": 128, "num_experts_per_tok": 1})");
  for (int64_t i = 47; i >= 1; i -= 2) c["moe_layers"].push_back(i);  // unsorted on purpose
  const ModelSpec listed = model_from_hf_config(c, "l").value();
  EXPECT_EQ(listed.dense_layer_count(), 24);
  EXPECT_EQ(total_params(listed), int64_t{400711848960});
}

// decoder_sparse_step 2 (small_qwen_json): h 64, 4 heads of 16 (q 64), 2 KV heads (kv 32).
//   attention 64 (64 + 32 + 32 + 64) = 12,288; QKV biases 64 + 32 + 32 = 128; norms 2 x 64 = 128
//   dense layer: 12,544 + 3 x 64 x 128 = 37,120
//   MoE layer:   12,544 + 4 x 3 x 64 x 32 + 3 x 64 x 48 (shared) + 64 x 4 (router) + 64 (shared gate)
//                = 12,544 + 24,576 + 9,216 + 256 + 64 = 46,656
//   2 x 37,120 + 2 x 46,656 + 2 x 100 x 64 (untied) + 64 = 180,416.
// mlp_only_layers [1] with step 1: layer 1 dense, 0, 2, 3 MoE: 37,120 + 3 x 46,656 + 12,864 = 189,952.
TEST(MoeLayers, QwenDecoderSparseStepParametersExact) {
  const ModelSpec m = model_from_hf_config(small_qwen_json(), "q").value();
  EXPECT_EQ(m.dense_layer_count(), 2);
  EXPECT_TRUE(m.is_dense_layer(0));
  EXPECT_FALSE(m.is_dense_layer(3));
  EXPECT_EQ(total_params(m), 180416);
  nlohmann::json only = small_qwen_json();
  only["decoder_sparse_step"] = 1;
  only["mlp_only_layers"] = {1};
  const ModelSpec o = model_from_hf_config(only, "q").value();
  EXPECT_EQ(o.dense_layer_count(), 1);
  EXPECT_EQ(total_params(o), 189952);
  // Errors name the key: no MoE layer left, a layer that is not one.
  only["mlp_only_layers"] = {0, 1, 2, 3};
  EXPECT_EQ(model_from_hf_config(only, "q").error(), "q: key 'mlp_only_layers': leaves no MoE layer");
  only["mlp_only_layers"] = {4};
  EXPECT_EQ(model_from_hf_config(only, "q").error(), "q: key 'mlp_only_layers': has 4, not a layer index in [0, 4)");
}

// Each pipeline chunk counts the dense layers of the pattern it holds. Maverick on pp 16: 3 layers a
// stage; stage 0 holds layers 0-2 (0 and 2 dense), stage 1 layers 3-5 (4 dense). Stage 1's
// parameters (tp 1, ep 1): shared per-GPU ones 2 MoE x (62,914,560 + 10,240 + 125,829,120 shared
// + 655,360 router) + 1 dense x 314,583,040 = 693,401,600; experts 2 x 16,106,127,360.
TEST(MoeLayers, ChunksCountTheirDenseLayers) {
  const ModelSpec m = maverick();
  Plan p;
  p.pp = 16, p.dp = 1, p.global_batch = 16, p.micro_batch = 1, p.seq_len = 4096;
  EXPECT_EQ(chunk_dense_layers(m, p, 0, 0), 2);
  EXPECT_EQ(chunk_dense_layers(m, p, 1, 0), 1);
  const StageParams s1 = stage_param_split(m, p, 1);
  EXPECT_DOUBLE_EQ(s1.dense, 693401600.0);
  EXPECT_DOUBLE_EQ(s1.expert, 2.0 * 16106127360.0);
  // Interleaved, pp 4 x 2 chunks of 6 layers: every chunk holds 3 dense layers.
  p.pp = 4, p.virtual_stages = 2, p.schedule = Schedule::kInterleaved;
  for (int64_t s = 0; s < 4; ++s)
    for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(chunk_dense_layers(m, p, s, c), 3);
  EXPECT_EQ(stage_dense_layers(m, p, 0), 6);
}

// The CPU runtime's transformer has one MLP kind for all layers: a Mixtral with a dense MLP every
// second layer is refused in one line.
TEST(MoeLayers, CpuRuntimeRefusesInterleavedDenseLayers) {
  ModelSpec m = load_model("mixtral-8x7b").value();
  m.moe_layer_step = 2;
  m.dense_ffn_hidden = m.ffn_hidden;
  Plan p;
  p.dp = 8, p.global_batch = 8, p.micro_batch = 1, p.seq_len = 4096;
  const Status s = check_runtime_support(m, p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error(), "the CPU runtime does not execute dense layers among MoE ones (mixtral-8x7b: 16 of 32 layers dense; "
                       "every layer MoE runs) yet");
}

// --moe-layer-freq states the pattern as a list Megatron evaluates (layer 0 first).
TEST(MoeLayers, MegatronStatesTheLayerPattern) {
  const ModelSpec q = model_from_hf_config(small_qwen_json(), "q").value();
  Plan p;
  p.dp = 8, p.zero = 1, p.global_batch = 64, p.micro_batch = 1, p.seq_len = 64;
  const std::string line = megatron_arguments(q, p).value();
  EXPECT_NE(line.find("--moe-layer-freq '(([0]*1+[1]*1)*2)'"), std::string::npos) << line;
  EXPECT_NE(line.find("--ffn-hidden-size 128"), std::string::npos) << line;  // the dense layers' width
  EXPECT_NE(line.find("--moe-ffn-hidden-size 32"), std::string::npos) << line;
  nlohmann::json only = small_qwen_json();
  only["decoder_sparse_step"] = 1;
  only["mlp_only_layers"] = {1};
  const std::string one = megatron_arguments(model_from_hf_config(only, "q").value(), p).value();
  EXPECT_NE(one.find("--moe-layer-freq '([1]*1+[0]*1+[1]*2)'"), std::string::npos) << one;
  // DeepSeek's leading dense layers keep their form.
  const ModelSpec v3 = load_model("deepseek-v3").value();
  EXPECT_NE(megatron_arguments(v3, p).value().find("--moe-layer-freq '([0]*3+[1]*58)'"), std::string::npos);
  // Llama 4's chunked attention has no Megatron-LM argument: refused in one line, listed by no plan.
  const ModelSpec m = maverick();
  EXPECT_EQ(megatron_model_refusal(m), "chunked local attention (attention_chunk_size 8192), which Megatron-LM's command line cannot set");
  EXPECT_EQ(framework_refusal("megatron", p, m).rfind("megatron cannot run llama4_text: chunked", 0), 0u);
}

}  // namespace
}  // namespace parallax
