// Megatron's --recompute-modules under selective recompute: what each module keeps out of memory,
// what it re-runs, and where the set is written, refused or exported.
#include <string>

#include <gtest/gtest.h>

#include "planner/export.h"
#include "program/framework.h"
#include "program/model_state.h"
#include "program/runtime_support.h"
#include "simulator/step_costs.h"
#include "small_plans.h"

namespace parallax {
namespace {

using testing_support::load;
using testing_support::plan;
using testing_support::round_cluster;

Plan selective(unsigned modules) {
  Plan p = plan(1, 1, 1, 1, 4096);
  p.recompute = Recompute::kSelective;
  p.execution.recompute_modules = modules;
  return p;
}

// Mixtral-8x7B (h 4,096, FFN 14,336, top-2, 32 heads), TP 1, 4,096 tokens, bf16, flash. Against the
// default core_attn, {layernorm, moe_act} keeps neither norm output feeding QKV and the router
// (2h + 2h), nor the routed experts' activation output (2 x 14,336 x 2), but keeps the flash
// kernel's fp32 log-sum-exp (4 x 32): (-16,384 - 57,344 + 128) x 4,096 = -301,465,600 bytes.
TEST(RecomputeModules, WhatEachModuleDoesNotKeep) {
  const ModelSpec m = load("mixtral-8x7b");
  const double core = layer_activation_bytes(m, activation_options(selective(kCoreAttn))).total();
  const double norm_act = layer_activation_bytes(m, activation_options(selective(kLayernorm | kMoeAct))).total();
  EXPECT_DOUBLE_EQ(norm_act - core, (-16384.0 - 57344 + 128) * 4096);
  // DeepSeek-V3's MLA: Q and K of 128 x 192 and V of 128 x 128 after the up-projections,
  // 2 x 24,576 + 2 x 24,576 + 2 x 16,384 = 131,072 bytes a token, are recomputed from the latents.
  const ModelSpec ds = load("deepseek-v3");
  const double ds_core = layer_activation_bytes(ds, activation_options(selective(kCoreAttn))).attention;
  EXPECT_DOUBLE_EQ(ds_core - layer_activation_bytes(ds, activation_options(selective(kCoreAttn | kMlaUpProj))).attention,
                   131072.0 * 4096);
  // Re-running the up-projections costs 2 FLOPs per weight and token: 512 x 128 x 256 (kv) +
  // 1,536 x 24,576 (q) = 54,525,952 weights, in each of 61 layers and the multi-token-prediction
  // depth's, for 4,096 x 8 tokens.
  EXPECT_EQ(mla_up_proj_weights(ds), 54525952);
  const double with = hardware_flops_per_step(ds, 4096, 8, Recompute::kSelective, SelectiveRecompute::kAttentionCore,
                                              AttentionKernel::kFlash, 1, kCoreAttn | kMlaUpProj);
  const double without = hardware_flops_per_step(ds, 4096, 8, Recompute::kSelective, SelectiveRecompute::kAttentionCore,
                                                 AttentionKernel::kFlash, 1, kCoreAttn);
  EXPECT_NEAR(with - without, 2.0 * 54525952 * 62 * 4096 * 8, 1e3);
}

// What the backward re-runs, on the round GPU (1,000 GB/s): layernorm the two fused norms, read 2h
// and write 2h in bf16, 2 x 4 x 4,096 x 2 bytes x 4,096 tokens = 134.217728 us; moe_act SwiGLU over
// the two routed copies, read 4f and write 2f, 2 x 14,336 x 6 bytes x 4,096 = 704.643072 us.
TEST(RecomputeModules, WhatEachModuleReRuns) {
  const ModelSpec m = load("mixtral-8x7b");
  const ClusterSpec c = round_cluster();
  const double none = layer_timing(m, c, plan(1, 1, 1, 1, 4096)).backward_input_s;
  EXPECT_NEAR(layer_timing(m, c, selective(kLayernorm)).backward_input_s - none, 134.217728e-6, 1e-12);
  EXPECT_NEAR(layer_timing(m, c, selective(kMoeAct)).backward_input_s - none, 704.643072e-6, 1e-12);
  EXPECT_GT(layer_timing(m, c, selective(kCoreAttn)).backward_input_s, none);
}

// The set round-trips through a plan's JSON; a name Megatron does not have, or modules beside
// torchtitan's op policy, is an error naming the key. Megatron exports it; the 2022 code, torchtitan
// and the runtimes refuse it.
TEST(RecomputeModules, WrittenReadRefusedAndExported) {
  const ModelSpec m = load("mixtral-8x7b");
  Plan p = selective(kLayernorm | kMoeAct);
  p.ep = 8, p.dp = 8, p.global_batch = 8, p.zero = 1;
  const nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["execution"]["recompute_modules"], nlohmann::json::parse(R"(["layernorm", "moe_act"])"));
  EXPECT_EQ(plan_from_json(j, "p.json").value().execution.recompute_modules, kLayernorm | kMoeAct);
  nlohmann::json bad = j;
  bad["execution"]["recompute_modules"] = {"layernorm", "mlp"};
  EXPECT_EQ(plan_from_json(bad, "p.json").error(),
            "p.json: execution: key 'recompute_modules': unknown module \"mlp\" (expected core_attn|layernorm|moe_act|mla_up_proj)");
  bad["execution"]["recompute_modules"] = {"layernorm"};
  bad["execution"]["selective"] = "ops";
  EXPECT_EQ(plan_from_json(bad, "p.json").error(),
            "p.json: execution: key 'recompute_modules': are Megatron's; selective 'ops' is torchtitan's op-level policy");
  const std::string args = megatron_arguments(m, p).value();
  EXPECT_NE(args.find("--recompute-granularity selective --recompute-modules layernorm moe_act"), std::string::npos) << args;
  EXPECT_EQ(framework_refusal("megatron", p, m), "");
  EXPECT_NE(framework_refusal("megatron-2022", p, m).find("attention core only"), std::string::npos);
  Plan fsdp2 = p;
  fsdp2.zero = 3;
  EXPECT_NE(framework_refusal("torchtitan", fsdp2, m).find("recompute_modules"), std::string::npos);
  EXPECT_NE(check_runtime_support(load("llama3-8b"), selective(kLayernorm)).error().find("recompute_modules"), std::string::npos);
}

}  // namespace
}  // namespace parallax
